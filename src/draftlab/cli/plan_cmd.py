"""``draftlab plan``: will speculation pay off, and with which config?

Three ways in: a target, a drafter and prompts (``--target T --drafter D --prompts P``: probe every
config and profile the pair here, then plan); measured costs plus accept lengths (``--costs
PROFILE.json --probe PROBE.json``); or numbers read off a serving engine (``--baseline-tps 82
--spec-tps 52 --accept-length 1.5``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one, check_device, checked, non_negative, positive, share
from draftlab.cli.common import lower_on_oom, parse_ints
from draftlab.cli.deployed import EngineChoice, engine_choice
from draftlab.cli.groups import grouped
from draftlab.cli.output import JsonOption, emit_json, show
from draftlab.cli.placement import Placement, ThreadsOption
from draftlab.cli.schedule_opts import ScheduleRequest
from draftlab.console import console
from draftlab.cost.engine_numbers import estimate_from_engine, parse_what_if
from draftlab.cost.plan import DEFAULT_GRID, Plan, make_plan, parse_grid
from draftlab.cost.probes import load_probes, profile_accept_lengths, save_probes
from draftlab.cost.profile import load_profile, save_profile
from draftlab.documents import to_jsonable
from draftlab.errors import DraftlabError
from draftlab.fsutil import refuse_overlap
from draftlab.report.plan import (
    render_engine_estimate,
    render_measurements,
    render_plan,
)
from draftlab.report.schedule import render_schedule


@app.command()
@grouped
def plan(
    target: Annotated[Optional[Path], typer.Option(help="Target model folder: probe and profile it here (with --drafter and --prompts).")] = None,
    drafter: Annotated[Optional[Path], typer.Option(help="EAGLE-3 drafter folder (with --target).")] = None,
    prompts: Annotated[Optional[Path], typer.Option(help="JSONL prompts to probe accept lengths on (with --target).")] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option(callback=at_least_one, help="With --target: continuation tokens per prompt for the probe (default 128).")] = None,
    context: Annotated[Optional[int], typer.Option(callback=at_least_one, help="With --target: KV-cache length the timed passes run after (default 256).")] = None,
    dtype: Annotated[Optional[str], typer.Option(help="With --target: float32, bfloat16 or float16 (default bfloat16 on CUDA, float32 on CPU).")] = None,
    device: Annotated[Optional[str], typer.Option(callback=check_device, help="With --target: cpu, cuda or cuda:N (default cuda when available).")] = None,
    temperature: Annotated[Optional[float], typer.Option(callback=non_negative, help="With --target: plan for sampling at this temperature (the probe's estimate; default 0, exact greedy).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="With --target and --temperature: seed of the sampled continuations.")] = None,
    repeats: Annotated[Optional[int], typer.Option(callback=at_least_one, help="With --target: timed calls per measured pass (default 10).")] = None,
    overhead_ms: Annotated[Optional[float], typer.Option(callback=non_negative, help="With --target: fixed per-cycle overhead to assume, ms (default 0).")] = None,
    save_costs: Annotated[Optional[Path], typer.Option(help="With --target: also write the measured PROFILE.json here.")] = None,
    save_probe: Annotated[Optional[Path], typer.Option(help="With --target: also write the probe results (one per config) here.")] = None,
    costs: Annotated[Optional[Path], typer.Option(help="PROFILE.json written by draftlab profile.")] = None,
    probe: Annotated[Optional[list[Path]], typer.Option(help="Probe result JSON (one config, or a list); repeatable.")] = None,
    profile: Annotated[Optional[Path], typer.Option(help="Acceptance profile (probe --profile-out, ModelOpt's speculation_profile.json): accept lengths for its config and for shorter chains.")] = None,
    grid: Annotated[Optional[str], typer.Option(help="Configs to plan, e.g. 3/1/4,5/4/8:2.9 (':AL' assumes an accept length). Default: the probed configs; with --target " + DEFAULT_GRID + ".")] = None,
    batch_sizes: Annotated[Optional[str], typer.Option(help="Batch sizes to plan (default: all profiled), e.g. 1,8,32.")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write a PNG of predicted tok/s per config and batch size.")] = None,
    baseline_tps: Annotated[Optional[float], typer.Option(callback=positive, help="Engine: tokens/s without speculation.")] = None,
    decode_ms: Annotated[Optional[float], typer.Option(callback=positive, help="Engine: decode step in ms (instead of --baseline-tps).")] = None,
    spec_tps: Annotated[Optional[float], typer.Option(callback=positive, help="Engine: tokens/s with speculation.")] = None,
    cycle_ms: Annotated[Optional[float], typer.Option(callback=positive, help="Engine: speculative cycle in ms (instead of --spec-tps).")] = None,
    accept_length: Annotated[Optional[float], typer.Option(callback=checked(minimum=1), help="Engine: mean accept length of the speculative run (bonus token included).")] = None,
    allreduce_ms: Annotated[Optional[float], typer.Option(callback=non_negative, help="Engine: all-reduce time per cycle in ms.")] = None,
    allreduce_share: Annotated[Optional[float], typer.Option(callback=share, help="Engine: all-reduce share of a cycle, 0..1.")] = None,
    batch_size: Annotated[int, typer.Option(callback=at_least_one, help="Engine: batch size the throughputs were measured at.")] = 1,
    what_if: Annotated[Optional[list[str]], typer.Option(help="Engine: a scenario, e.g. accept_length=3.2 or allreduce_scale=0.5; repeatable.")] = None,
    schedule: Annotated[Optional[str], typer.Option(help="Also write the best chain length per batch-size range in this engine's format: sglang, vllm or trtllm (JSON key schedule).")] = None,
    engine_version: Annotated[Optional[str], typer.Option(help="With --schedule: the engine release to write for; with --target: the release of --engine whose rules apply (default: the newest draftlab knows).")] = None,
    schedule_out: Annotated[Optional[Path], typer.Option(help="With --schedule: write the schedule to this file (what the engine or draftlab launch --schedule reads).")] = None,
    schedule_max_batch: Annotated[Optional[int], typer.Option(callback=at_least_one, help="With --schedule: the largest batch size the schedule covers (default: the largest planned).")] = None,
    served: Annotated[bool, typer.Option("--served", help="With --target: also time the target served by draftlab serve (batching, per-token HTTP work, the bench client) at every batch size and predict that server's tok/s for requests of --max-new-tokens (JSON served_*); --schedule then chooses by them.")] = False,
    asked: EngineChoice = engine_choice(version=False),  # --engine-version: also --schedule's, read below
    threads: ThreadsOption = None,
    json_out: JsonOption = False,
) -> None:
    """Predict tokens per second per speculation config, the break-even accept length and the best config."""
    _refuse_outputs({"--save-costs": save_costs, "--save-probe": save_probe, "--plot": plot,
                     "--schedule-out": schedule_out},
                    {"--target": target, "--drafter": drafter, "--prompts": prompts, "--costs": costs, "--probe": probe,
                     "--profile": profile})
    pair_mode = target is not None or drafter is not None or prompts is not None
    wanted = ScheduleRequest.of(schedule, None if pair_mode and schedule is None else engine_version, schedule_out,
                                schedule_max_batch)
    engine = {"baseline_tps": baseline_tps, "decode_ms": decode_ms, "spec_tps": spec_tps,
              "cycle_ms": cycle_ms, "accept_length": accept_length,
              "allreduce_ms": allreduce_ms, "allreduce_share": allreduce_share}
    given_engine = [k for k, v in engine.items() if v is not None] + (["what_if"] if what_if else [])
    pair_options = {"max_new_tokens": max_new_tokens, "context": context, "dtype": dtype, "device": device,
                    "temperature": temperature, "seed": seed, "repeats": repeats, "overhead_ms": overhead_ms,
                    "save_costs": save_costs, "save_probe": save_probe, "threads": threads,
                    "served": served or None, "draft_window": asked.draft_window}
    if pair_mode:
        if costs is not None or probe or profile is not None:
            raise DraftlabError("--target/--drafter/--prompts probe and profile the pair here; drop --costs, "
                                "--probe and --profile (they plan from earlier measurements)")
        _refuse_engine_numbers(given_engine, "--target plans from the pair itself")
        _plan_pair(target, drafter, prompts, grid, batch_sizes, plot, json_out, pair_options, wanted,
                   EngineChoice.of(asked.engine, engine_version, asked.draft_window))
        return
    given_pair = [k for k, v in pair_options.items() if v is not None]
    if given_pair:
        raise DraftlabError(f"--{given_pair[0].replace('_', '-')} goes with --target T --drafter D --prompts P")
    if costs is not None:
        _refuse_engine_numbers(given_engine, "--costs plans from a profile")
        _plan_measured(costs, probe or [], profile, grid, batch_sizes, plot, json_out, wanted)
        return
    if probe or profile or grid or batch_sizes or plot:
        raise DraftlabError("--probe, --profile, --grid, --batch-sizes and --plot need --costs PROFILE.json")
    _plan_engine(engine, batch_size, what_if or [], json_out, wanted)


def _refuse_outputs(outputs: dict[str, Path | None], inputs: dict[str, Any]) -> None:
    """Each output given may be no input and no output named before it."""
    seen = dict(inputs)
    for label, path in outputs.items():
        if path is not None:
            refuse_overlap(path, seen)
            seen[label] = path


def _refuse_engine_numbers(given: list[str], mode: str) -> None:
    """Engine numbers are a mode of their own: refused beside ``--target`` and ``--costs``."""
    if given:
        raise DraftlabError(f"{mode}; drop --{given[0].replace('_', '-')} (engine numbers are a separate mode)")


def _plan_pair(target: Path | None, drafter: Path | None, prompts: Path | None, grid: str | None,
               batch_sizes: str | None, plot: Path | None, json_out: bool, options: dict[str, Any],
               wanted: ScheduleRequest | None, asked: EngineChoice) -> None:
    """``--target --drafter --prompts``: probe every grid config, profile the pair, plan, for the engine release
    ``asked``. ``options`` holds the pair-mode options (those not given keep auto_plan's defaults)."""
    from draftlab.cost.auto_plan import MAX_NEW_TOKENS, auto_plan

    batches = [1] if batch_sizes is None else parse_ints("--batch-sizes", batch_sizes)
    missing = [name for name, v in (("--target", target), ("--drafter", drafter), ("--prompts", prompts)) if v is None]
    if missing:
        raise DraftlabError(f"planning from a pair needs --target, --drafter and --prompts; add {missing[0]}")
    from draftlab.models.mtp import names_mtp

    if names_mtp(drafter):
        raise DraftlabError("--drafter mtp: plan the target's own MTP head from its measurements: draftlab profile "
                            "--drafter mtp and probe --drafter mtp --json, then plan --costs PROFILE --probe PROBE "
                            "(or assess a drafter: it adds the head as a candidate)")
    entries = parse_grid(grid) if grid else None
    assumed = next((e for e in entries or [] if e.accept_length is not None), None)
    if assumed is not None:
        raise DraftlabError(f"--grid {assumed.config.label}:{assumed.accept_length:g}: with --target the probe "
                            f"measures every accept length; drop ':{assumed.accept_length:g}'")
    deployment = asked.resolve(target, drafter)
    save_costs, save_probe, _ = options.pop("save_costs"), options.pop("save_probe"), options.pop("draft_window")
    where = Placement.of(options.pop("dtype"), options.pop("device"), threads=options.pop("threads"))
    options["context_tokens"] = options.pop("context")
    given = {k: v for k, v in options.items() if v is not None}  # the others keep auto_plan's defaults
    with lower_on_oom(batch_sizes=",".join(map(str, batches)),
                      max_new_tokens=given.get("max_new_tokens") or MAX_NEW_TOKENS):
        result = auto_plan(target, drafter, prompts, grid=None if entries is None else [e.config for e in entries],
                           batch_sizes=batches, dtype=where.dtype, device=where.device, deployment=deployment,
                           **given)
    if save_costs is not None:
        save_profile(result.profile, save_costs)
    if save_probe is not None:
        save_probes(result.probes, save_probe)
    if not json_out:
        render_measurements(result, console)
    _emit_plan(result.plan, plot, json_out, timings=result.timings, schedule=wanted, engine=deployment.describe())


def _plan_measured(costs: Path, probe: list[Path], profile: Path | None, grid: str | None, batch_sizes: str | None,
                   plot: Path | None, json_out: bool, wanted: ScheduleRequest | None) -> None:
    """``--costs PROFILE.json`` with accept lengths from ``--probe`` files, an acceptance ``--profile``
    or ``--grid`` entries that assume them; a probe of ``--drafter mtp`` plans the target's own MTP head."""
    entries = parse_grid(grid) if grid else None
    accepts = load_probes(probe)
    if profile is not None:
        configs = None if entries is None else [e.config for e in entries if e.accept_length is None]
        accepts += profile_accept_lengths(profile, configs, covered=[a.config for a in accepts])
    heads = [a for a in accepts if a.method == "mtp"]  # the target's own MTP head: priced by its own passes
    drafter = [a for a in accepts if a.method != "mtp"]
    result = make_plan(load_profile(costs), drafter, grid=entries if entries is not None or drafter else [],
                       batch_sizes=None if batch_sizes is None else parse_ints("--batch-sizes", batch_sizes), mtp=heads)
    _emit_plan(result, plot, json_out, schedule=wanted)


def _plan_engine(numbers: dict[str, float | None], batch_size: int, what_if: list[str], json_out: bool,
                 wanted: ScheduleRequest | None) -> None:
    """Numbers read off a serving engine: what the speculative run gained, and what-if scenarios."""
    if all(v is None for v in numbers.values()) and not what_if:
        raise DraftlabError(
            "give --costs PROFILE.json --probe PROBE.json, or numbers read off an engine "
            "(--baseline-tps 82 --spec-tps 52 --accept-length 1.5)"
        )
    if wanted is not None:
        raise DraftlabError("--schedule needs predictions per chain length and batch size (--costs with --probe, or "
                            "--target); engine numbers describe one config at one batch size")
    estimate = estimate_from_engine(batch_size=batch_size, **numbers, what_ifs=[parse_what_if(w) for w in what_if])
    show(estimate, json_out, render_engine_estimate)


def _emit_plan(result: Plan, plot: Path | None, json_out: bool, timings: dict[str, float] | None = None,
               schedule: ScheduleRequest | None = None, engine: dict[str, Any] | None = None) -> None:
    """The plan (with its schedule, plot and ``engine``: the deployment's fields in pair mode), as JSON or tables."""
    written = None if schedule is None else schedule.write(result)
    plot_path = None
    if plot is not None:
        from draftlab.cost.plot import plot_plan

        plot_path = plot_plan(result, plot)
    if json_out:
        extra = {} if written is None else {"schedule": written.value, "schedule_plan": written.summary()}
        emit_json({**to_jsonable(result), "plot": plot_path, **({"timings": timings} if timings else {}), **extra,
                   **(engine or {})})
    else:
        render_plan(result, console, plot_path)
        if written is not None:
            render_schedule(written, console, schedule.out)
