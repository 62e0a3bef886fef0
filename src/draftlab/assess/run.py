"""``assess`` as a library call: phase 0 of reusing a drafter on a target, in one process.

    inspect + check (--fix into DIR/fixed when fixable) -> load the pair once -> the target's own
    continuations, decoded once -> vocabulary coverage of them, the exact probe of every grid config,
    the model-free baselines (:mod:`draftlab.probe.modelfree`) on them, and the target's own MTP head where
    the release serves one (:mod:`draftlab.assess.mtp`) -> with OLD: drift and the probe on OLD (the
    ceiling) -> profile the pair (and the head's passes) -> plan, with the model-free methods and the MTP
    head as candidates -> :func:`draftlab.assess.verdict.decide`.

It runs in parts (:data:`draftlab.assess.partial.PARTS`: the probes, OLD, the profile); Ctrl-C once the
first has finished leaves DIR with what finished and ``--resume`` runs the rest. Progress goes to
stderr, one line per step, whether or not it is a terminal. The timings are checked before the
verdict uses them (:mod:`draftlab.cost.consistency`, and the plan held against a real decode as ``plan``
does, :mod:`draftlab.cost.crosscheck`).

Every sub-result is the one the single command gives on the same inputs (``probe``, ``drift``,
``vocab coverage``, ``plan --costs DIR/profile.json --probe DIR/probe.json``); they are written to DIR
beside ``assess.json`` so ``report`` can show them and a user can re-run any step alone.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from draftlab.acceptance.profile import write_profile
from draftlab.assess.mtp import MtpCandidate, load_head, mtp_candidate
from draftlab.assess.partial import PARTS, read_partial
from draftlab.assess.repetition import repetition
from draftlab.assess.slices import Cycles, Slice, context_width, slices
from draftlab.assess.verdict import Evidence, Verdict, decide
from draftlab.checkpoint import TargetConfig, open_checkpoint
from draftlab.compat import check_pair, fix_pair
from draftlab.compat.check import open_pair
from draftlab.compat.findings import CheckResult
from draftlab.compat.fix import FixResult
from draftlab.compat.summary import InspectResult, inspect_checkpoint
from draftlab.cost.auto_plan import default_grid, probe_accept_length, profile_sizes
from draftlab.cost.consistency import TimingCheck, check_timings
from draftlab.cost.crosscheck import check_sentence, held_against
from draftlab.cost.engine_numbers import EngineEstimate, estimate_from_engine
from draftlab.cost.model import SpecConfig, tokens_per_second
from draftlab.cost.plan import ConfigPlan, GridEntry, ModelFreeEntry, Plan, make_plan
from draftlab.cost.probes import AcceptLength
from draftlab.cost.profile import FORMAT as PROFILE_FORMAT
from draftlab.cost.profile import CostTable, Profile, load_profile
from draftlab.cost.profiler import profile_costs
from draftlab.cost.runtime_workload import runtime_workload
from draftlab.cost.schedule import engine_schedule
from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.decode.prompts import read_categories
from draftlab.documents import document, provenance, to_jsonable
from draftlab.engines.deployment import Deployment
from draftlab.engines.schedule import dumps
from draftlab.engines.sglang_flags import SpecFlags, exact_spec_flags
from draftlab.errors import DraftlabError
from draftlab.fsutil import atomic_dir
from draftlab.models.pair import LoadedPair, deployment_for, load_pair
from draftlab.probe import modelfree
from draftlab.probe.drift import DriftResult, compare_targets, drift_sequences
from draftlab.probe.probe import Clock, ProbeResult, decode_continuations, probe_configs
from draftlab.probe.samples import Decoded
from draftlab.probe.to_profile import profile_from_probe
from draftlab.vocab.counts import TokenCounts
from draftlab.vocab.coverage import CoverageResult, coverage
from draftlab.vocab.mapping import VocabMapping

DEFAULT_BATCH_SIZES = (1, 8, 32, 64)
# vLLM's own defaults: prompt_lookup_min = prompt_lookup_max = 5 when neither is set
# (vllm/config/speculative.py, SpeculativeConfig.__post_init__); 4 drafted tokens, a common choice
DEFAULT_NGRAM = modelfree.Ngram(prompt_lookup_min=5, prompt_lookup_max=5, num_speculative_tokens=4)
MODEL_FREE = ("ngram", "suffix")  # the model-free baselines assess can simulate
# the profile by device: timed calls per pass, untimed warm-up calls before each round's, and the KV context the
# passes run after. A CPU's passes are slow and need one warm-up call (no kernels to pick, no graphs to capture);
# what runs on one is a small model, whose plan a 64-token context does not change
PROFILE = {"cuda": {"repeats": 10, "warmup": 3, "context_tokens": 256},
           "cpu": {"repeats": 5, "warmup": 1, "context_tokens": 64}}
CHECK_PROMPTS = 4  # prompts the plan's cross-check decodes for real


@dataclass
class ModelFreeResult:
    """A model-free method's exact accept length on the target's continuations."""

    method: str  # "ngram" or "suffix"
    options: dict[str, Any]  # the vLLM speculative-config fields it stands for
    mean_accept_length: float
    mean_drafted: float  # tokens proposed per cycle
    num_cycles: int
    source: str  # the engine code the simulation follows


@dataclass
class AssessResult:
    verdict: Verdict | None  # None in a partial result (``missing`` says what is still to run)
    config: dict[str, Any]
    drafter: str  # the drafter everything ran on: the given one, or the fixed copy
    inspect: InspectResult
    check: CheckResult
    fix: FixResult | None = None
    coverage: CoverageResult | None = None
    probes: list[ProbeResult] | None = None
    old_probes: list[ProbeResult] | None = None
    drift: DriftResult | None = None
    model_free: list[ModelFreeResult] = field(default_factory=list)
    profile: Profile | None = None
    plan: Plan | None = None
    old_plan: Plan | None = None
    engine_estimate: EngineEstimate | None = None  # with engine numbers, in place of profile and plan
    schedule: dict[str, Any] | None = None  # the plan's K per batch-size range, exactly as --engine reads it
    schedule_plan: dict[str, Any] | None = None  # its ranges, release and notes (plan --schedule's schedule_plan)
    schedule_note: str | None = None  # why there is no schedule, when there is none
    slices: dict[str, dict[str, dict[str, Slice]]] = field(default_factory=dict)  # method/config -> kind -> name
    files: dict[str, str] = field(default_factory=dict)  # what DIR holds, by sub-result
    timings: dict[str, float] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)  # parts measured (assess.partial.PARTS), kept or not
    missing: list[str] = field(default_factory=list)  # parts an interrupted run did not finish (--resume runs them)
    timing: TimingCheck | None = None  # the profile's and the plan's timings checked against each other
    measured_checks: list[dict[str, Any]] = field(default_factory=list)  # the plan held against a real decode
    repetition: float | None = None  # share of continuation tokens repeating earlier text (assess.repetition)
    mtp_probes: list[ProbeResult] | None = None  # the target's own MTP head on the same continuations, per config
    mtp: dict[str, Any] | None = None  # that head as the release serves it (engine fields, layer, engine file)
    mtp_note: str | None = None  # why the target's MTP head is no candidate, or not priced, where it ships one


def assess(drafter: str | Path, target: str | Path, prompts: str | Path, out: str | Path, *,
           old_target: str | Path | None = None, engine: str = "sglang", engine_version: str | None = None,
           grid: Sequence[SpecConfig] | None = None, batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
           costs: str | Path | None = None, max_new_tokens: int = 128, context_tokens: int | None = None,
           ngram: modelfree.Ngram = DEFAULT_NGRAM, suffix: modelfree.Suffix | None = None,
           model_free: Sequence[str] = MODEL_FREE, engine_numbers: dict[str, float] | None = None,
           engine_batch_size: int = 1, draft_window: int | None = None,
           dtype: str | None = None, device: str | None = None, repeats: int | None = None,
           progress: bool = True, resume: bool = False) -> AssessResult:
    """Run phase 0 and decide; DIR ``out`` (new) receives every result, atomically. ``model_free``
    names the baselines to simulate (a subset of :data:`MODEL_FREE`: what the engine offers).
    ``engine_numbers`` (``plan``'s engine inputs: baseline_tps or decode_ms, spec_tps with
    accept_length or cycle_ms, allreduce_ms or allreduce_share), measured at ``engine_batch_size``
    with the one config of ``grid``, replace the profile and the plan. ``draft_window`` is SGLang's
    --speculative-draft-window-size; the check and every probe compute for one deployment of
    ``engine_version``. ``repeats`` (timed calls per profiled pass) and ``context_tokens`` default to
    :data:`PROFILE`'s for the device. ``resume``: DIR is what an interrupted run with the same inputs left; run what it misses."""
    unknown = sorted(set(model_free) - set(MODEL_FREE))
    if unknown:
        raise DraftlabError(f"--model-free: unknown method {unknown[0]!r}; choose from {', '.join(MODEL_FREE)}")
    configs = list(dict.fromkeys(grid if grid is not None else default_grid()))
    engine_estimate = _engine_estimate(engine_numbers, engine_batch_size, configs, costs)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    sized = PROFILE["cpu" if torch.device(device).type == "cpu" else "cuda"]
    run = _Run(
        drafter=drafter, target=target, prompts=prompts, out=Path(out), old_target=old_target, engine=engine,
        engine_version=engine_version, draft_window=draft_window, configs=configs, batch_sizes=batch_sizes, costs=costs,
        given_costs=load_profile(costs) if costs is not None else None,  # bad input fails before any work
        max_new_tokens=max_new_tokens, context_tokens=context_tokens or sized["context_tokens"], ngram=ngram,
        suffix=suffix or modelfree.Suffix(), model_free=model_free, engine_estimate=engine_estimate,
        dtype=dtype or ("float32" if device == "cpu" else "bfloat16"), device=device,
        repeats=repeats or sized["repeats"], warmup=sized["warmup"], progress=progress)
    if old_target is not None:
        _same_architecture(old_target, target)
    kept_parts, kept = read_partial(run.out, _inputs(run), AssessResult) if resume else ([], {})
    clock = Clock()
    with atomic_dir(run.out, overwrite=resume) as tmp, _steps(progress, device) as step:
        for name in ("continuations.jsonl", "vocab-counts.json", "profile.json") if resume else ():
            if (run.out / name).exists():
                shutil.copyfile(run.out / name, tmp / name)
        result, run_on = _check(run, tmp, step)
        clock.lap("check_s")
        after = result.fix.after if result.fix is not None else result.check
        if not after.ok:
            errors = [f"{f.code}: {f.message}" for f in after.findings if f.severity == "error"]
            result.verdict = decide(Evidence(fixed=_codes(result.fix), unfixable=errors,
                                             fixed_dir=str(run.out / "fixed")))
            _write(result, tmp, run.out)
            return result

        candidate, result.mtp_note = mtp_candidate(run.target, run.engine, run.engine_version, run.configs)
        run = replace(run, mtp=candidate)
        for name, value in kept.items():
            setattr(result, name, value)
        if "profile" in kept_parts:
            result.profile = load_profile(tmp / "profile.json")
        _measure(result, run, run_on, tmp, step, clock, kept_parts)
    if result.missing:
        print(f"assess: interrupted; {run.out} keeps what finished, its assess.json says what is missing "
              f"({', '.join(result.missing)}); run the same command with --resume to finish it", file=sys.stderr)
        raise KeyboardInterrupt
    return result


@dataclass(frozen=True)
class _Run:
    """One assess run's inputs, resolved (defaults filled in, bad input refused) before any work; what
    every step below reads."""

    drafter: str | Path  # as given; the steps after the check run on the fixed copy when there is one
    target: str | Path
    prompts: str | Path
    out: Path
    old_target: str | Path | None
    engine: str
    engine_version: str | None
    draft_window: int | None  # SGLang's --speculative-draft-window-size
    configs: list[SpecConfig]  # the grid, each config once
    batch_sizes: Sequence[int]
    costs: str | Path | None
    given_costs: Profile | None  # read from ``costs``; None: measured here
    max_new_tokens: int
    context_tokens: int
    ngram: modelfree.Ngram
    suffix: modelfree.Suffix
    model_free: Sequence[str]
    engine_estimate: EngineEstimate | None  # from engine numbers, in place of the profile and the plan
    dtype: str
    device: str
    repeats: int
    warmup: int
    progress: bool
    mtp: MtpCandidate | None = None  # the target's own MTP head, where the release serves it

    @property
    def lookahead(self) -> int:
        """The longest model-free proposal simulated: how far the continuations reach past max_new_tokens."""
        return max(self.ngram.num_speculative_tokens if "ngram" in self.model_free else 0,
                   self.suffix.num_speculative_tokens if "suffix" in self.model_free else 0)


def parse_model_free(text: str) -> list[str]:
    """``--model-free``: methods separated by commas, ``both`` for every one, ``none`` (or nothing) for none."""
    names = [n.strip() for n in text.split(",")]
    return list(dict.fromkeys(m for n in names for m in (MODEL_FREE if n == "both" else [n]) if m not in ("", "none")))


def _engine_estimate(engine_numbers: dict[str, float] | None, batch_size: int, configs: list[SpecConfig],
                     costs: str | Path | None) -> EngineEstimate | None:
    """The served figures from engine numbers, which describe one config and replace the measured costs."""
    if not engine_numbers:
        return None
    if costs is not None or len(configs) != 1:
        raise DraftlabError("engine numbers describe one served config: give --grid with exactly that config "
                            "(e.g. --grid 3/1/4) and no --costs")
    return estimate_from_engine(batch_size=batch_size, **engine_numbers)


def _check(run: _Run, tmp: Path, step: Callable[[str], None]) -> tuple[AssessResult, Path]:
    """inspect and check, and --fix into DIR/fixed when the findings are fixable: the result so far
    (its verdict still to decide) and the drafter every later step runs on."""
    step("inspect and check")
    inspected = inspect_checkpoint(run.drafter, engine=run.engine, target=run.target)
    checked = check_pair(run.drafter, run.target, engine=run.engine, engine_version=run.engine_version,
                         draft_window=run.draft_window)
    fixed, run_on = None, Path(run.drafter)
    if not checked.ok and checked.fixable:
        step("fixing the config into DIR/fixed")
        fixed = fix_pair(run.drafter, run.target, tmp / "fixed", engine=run.engine, engine_version=run.engine_version)
        run_on = tmp / "fixed"
    config = {**_inputs(run), "engine_version": checked.engine_version}
    result = AssessResult(verdict=None, config=config,  # type: ignore[arg-type]  # decided last
                          drafter=str(run.out / "fixed") if fixed is not None else str(run.drafter),
                          inspect=inspected, check=checked, fix=fixed)
    return result, run_on


def _inputs(run: _Run) -> dict[str, Any]:
    """The run's inputs as assess.json's ``config`` records them (what a resumed run must share)."""
    return {
        "drafter": str(run.drafter), "target": str(run.target),
        "old_target": None if run.old_target is None else str(run.old_target), "prompts": str(run.prompts),
        "engine": run.engine, "grid": [c.label for c in run.configs],
        "batch_sizes": sorted(set(run.batch_sizes)), "max_new_tokens": run.max_new_tokens,
        "costs": None if run.costs is None else str(run.costs), "model_free": list(run.model_free),
        "device": run.device, "dtype": run.dtype, "context_tokens": run.context_tokens,
    }


def _measure(result: AssessResult, run: _Run, drafter: Path, tmp: Path, step: Callable[[str], None],
             clock: Clock, kept: list[str]) -> None:
    """Everything after a passing check, into ``result`` and DIR: the pair loaded once, the parts
    (:data:`~draftlab.assess.partial.PARTS`) an interrupted run did not keep, then the plan and the verdict.
    Ctrl-C once the first part has finished writes what finished, ``result.missing`` naming the rest."""
    step("loading the pair")
    # the deployment the check of this drafter computed from (its Pair's), so both name the same layers
    deployment = open_pair(drafter, run.target, run.engine, run.engine_version, run.draft_window).deployment
    result.config.update(deployment.describe())
    pair = load_pair(run.target, drafter, deployment, dtype=run.dtype, device=run.device)
    head = None if run.mtp is None else _head(pair, run.mtp, run, result)
    clock.lap("load_s")
    flags = [exact_spec_flags(c.steps, c.topk, c.num_draft_tokens) for c in run.configs]
    parts = {"probe": lambda: _probe_part(result, run, pair, drafter, flags, deployment, tmp, step, head),
             "old": lambda: _on_old(result, run, pair, drafter, flags, tmp, step),
             "profile": lambda: _profile_part(result, run, pair, drafter, step, head)}
    needed = {"old": run.old_target is not None, "profile": run.engine_estimate is None and run.given_costs is None}
    result.finished = list(kept)
    result.missing = [p for p in PARTS if p not in kept and needed.get(p, True)]
    try:
        for name in list(result.missing):
            parts[name]()
            result.missing.remove(name)
            result.finished.append(name)
            clock.lap(f"{name}_s")
        _conclude(result, run, pair, tmp, step, clock, head)
    except KeyboardInterrupt:
        if "probe" in result.missing:
            raise  # nothing finished: nothing to keep
        result.verdict, result.missing = None, result.missing or ["verdict"]  # every part kept: the plan is left
        result.timings = clock.timings()
        _write(result, tmp, run.out)


def _head(pair: LoadedPair, candidate: MtpCandidate, run: _Run, result: AssessResult) -> LoadedPair:
    """The target's own MTP head over the pair's target model, as a pair of its own (the runner handing it the
    final hidden state); ``result.mtp`` names it."""
    final, head = load_head(pair.target, run.target, run.engine)
    result.mtp = {**candidate.serving.describe(), **head.describe(), "source": candidate.source,
                  "grid": [c.label for c in candidate.configs]}
    return LoadedPair(final, head, [], pair.deployment)  # type: ignore[arg-type]  # the drafter interface


def _probe_part(result: AssessResult, run: _Run, pair: LoadedPair, drafter: Path, flags: list[SpecFlags],
                deployment: Deployment, tmp: Path, step: Callable[[str], None], head: LoadedPair | None) -> None:
    """The target's continuations, decoded once; coverage, every grid config's probe, the MTP head's and the
    model-free baselines on them, their slices and how repetitive the text is. DIR gets the continuations and
    the counts."""
    step("decoding the target's continuations")
    decoded = decode_continuations(pair, run.target, run.prompts, flags, max_new_tokens=run.max_new_tokens,
                                   lookahead=run.lookahead, progress=run.progress)
    step("coverage, probe and model-free baselines")
    result.coverage, counts = _coverage(pair, drafter, decoded)
    result.probes = probe_configs(pair, run.target, run.prompts, flags, max_new_tokens=run.max_new_tokens,
                                  decoded=decoded)
    for probed in result.probes:
        probed.config.update(deployment.describe())
        probed.config["drafter"] = str(drafter)  # the report's heading names the pair: drafter on target
    categories = dict(enumerate(read_categories(run.prompts)))
    result.model_free, free_cycles = _model_free(run, decoded, pair.target.eos_token_ids)
    result.repetition = repetition(decoded.prompts, [c[:n] for c, n in zip(decoded.continuations,
                                                                            decoded.max_new_tokens)])
    lens = {s.index: s.prompt_len for s in decoded.samples}
    result.slices = _slices(run.configs, result.probes, None, free_cycles, lens, categories, run.max_new_tokens)
    if head is not None and run.mtp is not None:
        mine = [exact_spec_flags(c.steps, c.topk, c.num_draft_tokens) for c in run.mtp.configs]
        result.mtp_probes = probe_configs(head, run.target, run.prompts, mine, max_new_tokens=run.max_new_tokens,
                                          decoded=decoded)
        for probed in result.mtp_probes:
            probed.config.update({**(result.mtp or {}), "drafter": "mtp", "aux_layers": None})
        result.slices.update({f"mtp {label}": s for label, s in _slices(run.mtp.configs, result.mtp_probes, None, {},
                                                                         lens, categories, run.max_new_tokens).items()})
    counts.save(tmp / "vocab-counts.json")
    rows = [json.dumps({"input_ids": p, "response_ids": c[:n], "category": categories.get(i), "prompt_index": i})
            for i, p, c, n in zip(decoded.indices, decoded.prompts, decoded.continuations, decoded.max_new_tokens)]
    (tmp / "continuations.jsonl").write_text("\n".join(rows) + "\n")


def _profile_part(result: AssessResult, run: _Run, pair: LoadedPair, drafter: Path, step: Callable[[str], None],
                  head: LoadedPair | None) -> None:
    step(f"profiling the pair{' and the MTP head' if head else ''} ({run.repeats} timed calls per pass, interleaved)")
    result.profile = _profile(run, pair, drafter, _free_entries(result), head)
    result.profile = replace(result.profile, deployment=pair.deployment.describe(),
                             mtp=result.mtp if head is not None else None)


def _conclude(result: AssessResult, run: _Run, pair: LoadedPair, tmp: Path, step: Callable[[str], None],
              clock: Clock, head: LoadedPair | None) -> None:
    """The plan, its timings checked (and held against a real decode when measured here), the schedule,
    the verdict; DIR written."""
    if run.engine_estimate is not None:
        result.engine_estimate = run.engine_estimate
        if result.mtp_probes:
            result.mtp_note = ("engine numbers price the one config of the drafter they were measured with: the MTP "
                               "head is probed (probe-mtp.json), not priced")
    else:
        step("planning and checking the timings")
        _plan(result, run)
        assert result.profile is not None and result.plan is not None
        result.timing = check_timings(result.profile, result.plan)
        if run.given_costs is None:
            result.measured_checks = _cross_check(result, run, {"eagle3": pair, "mtp": head}, tmp)
        if _contradictions(result)[0]:
            result.schedule_note = "the timings contradict each other, so no schedule is chosen from them"
        else:
            _schedule(result, run.engine, run.engine_version)
    clock.lap("plan_s")
    result.verdict = _decide(result, run)
    result.timings = clock.timings()
    categories = dict(enumerate(read_categories(run.prompts)))
    write_profile(profile_from_probe(_served_probe(result), prompts=run.prompts, categories=categories),
                  tmp / "speculation_profile.json")
    _write(result, tmp, run.out)


def _cross_check(result: AssessResult, run: _Run, models: dict[str, LoadedPair | None], tmp: Path
                 ) -> list[dict[str, Any]]:
    """``plan``'s cross-check: the config that would serve at batch 1, the drafter's and the MTP head's (the
    ``models`` by plan method), decoded for real on a few prompts, its tok/s held against the plan's
    prediction at the accept length that decode reached."""
    assert result.plan is not None
    prompts = list(_prompt_ids(tmp).values())[:CHECK_PROMPTS]
    if 1 not in result.plan.decode_ms or not prompts:
        return []
    checks = []
    for method, pair in models.items():
        rows = [r for r in result.plan.configs if r.method == method and r.batch_size == 1]
        if pair is None or not rows:
            continue
        row = max(rows, key=lambda r: r.tokens_per_second)
        measured = _real_decode(pair, row, prompts, run.max_new_tokens)
        if measured is not None:
            predicted = tokens_per_second(1, measured[0], row.cycle_ms)
            checks.append(held_against(f"a real decode of {row.label} here, tok/s at batch 1", predicted, measured[1]))
    return checks


def _real_decode(pair: LoadedPair, row: ConfigPlan, prompts: list[list[int]], max_new_tokens: int
                 ) -> tuple[float, float] | None:
    """The mean accept length and tok/s of ``generate``'s decoder on ``prompts`` with ``row``'s config, after
    an untimed start (its first cycles set it up); None when no cycle ran."""
    decoder = SpeculativeDecoder(pair.target, pair.drafter, exact_spec_flags(row.steps, row.topk, row.num_draft_tokens))
    for _ in decoder.stream(prompts[0], max_new_tokens=8):
        pass
    tokens, lengths, elapsed = 0, [], 0.0
    for ids in prompts:
        start = time.perf_counter()
        for commit in decoder.stream(ids, max_new_tokens=max_new_tokens):
            tokens += len(commit.tokens)
            lengths += [commit.accept_length] if commit.accept_length is not None else []
        elapsed += time.perf_counter() - start
    if not lengths or elapsed <= 0:
        return None
    return sum(lengths) / len(lengths), tokens / elapsed


def _contradictions(result: AssessResult) -> tuple[list[str], list[int]]:
    """Every reason not to decide speed (the timings' contradictions and the cross-checks that disagree), and
    the batch sizes they name (a cross-check decodes at batch 1)."""
    found = list(result.timing.contradictions) if result.timing is not None else []
    named = set(result.timing.batch_sizes) if result.timing is not None else set()
    disagree = [check_sentence(c) for c in result.measured_checks if not c["agrees"]]
    return found + disagree, sorted(named | ({1} if disagree else set()))


def _prompt_ids(tmp: Path) -> dict[int, list[int]]:
    """The prompts' token ids by their index in the prompts file, as DIR/continuations.jsonl holds them."""
    rows = [json.loads(line) for line in (tmp / "continuations.jsonl").read_text().splitlines() if line]
    return {row["prompt_index"]: row["input_ids"] for row in rows}


def _on_old(result: AssessResult, run: _Run, pair: LoadedPair, drafter: Path, flags: list[SpecFlags], tmp: Path,
            step: Callable[[str], None]) -> None:
    """With OLD: the drift from OLD to the target, and every grid config's probe on OLD (the ceiling)."""
    assert run.old_target is not None
    step("drift and the probe on OLD")
    old = deployment_for(run.old_target, drafter, run.engine, run.engine_version, run.draft_window)
    old_pair = load_pair(run.old_target, drafter, old, dtype=run.dtype, device=run.device)
    result.drift = _drift(old_pair, pair, run)
    result.old_probes = probe_configs(old_pair, run.old_target, run.prompts, flags,
                                      max_new_tokens=run.max_new_tokens)
    for probed in result.old_probes:
        probed.config.update(old.describe())
        probed.config["drafter"] = str(drafter)
    del old_pair
    lens = {i: len(ids) for i, ids in _prompt_ids(tmp).items()}
    categories = dict(enumerate(read_categories(run.prompts)))
    result.slices.update(_slices(run.configs, [], result.old_probes, {}, lens, categories, run.max_new_tokens))


def _decide(result: AssessResult, run: _Run) -> Verdict:
    """The verdict on everything measured (with engine numbers: on the served config's figures)."""
    served = run.engine_estimate is not None
    drift, probes, old_probes = result.drift, result.probes or [], result.old_probes
    timing, timing_batches = _contradictions(result)
    return decide(Evidence(
        fixed=_codes(result.fix), unfixable=[], plan=result.plan, old_plan=result.old_plan,
        coverage=result.coverage.coverage, drift=drift.layers if drift else None,
        next_token_agreement=drift.next_token_agreement if drift else None,
        fixed_dir=str(run.out / "fixed"), engine=run.engine_estimate,
        engine_config=run.configs[0].label if served else None,
        accept_length=probes[0].mean_accept_length if served else None,
        accept_length_old=old_probes[0].mean_accept_length if served and old_probes else None,
        timing=timing, timing_batches=timing_batches, repetition=result.repetition,
        names=(Path(run.target).name, Path(run.old_target).name if run.old_target is not None else "OLD")))


def _served_probe(result: AssessResult) -> ProbeResult:
    """The probe of the config that would serve: the engine's, else the drafter's best at the smallest batch
    size (its acceptance profile is what ``plan --profile`` and ``--synthetic-acceptance`` read)."""
    probes = result.probes or []
    if result.plan is None:
        return probes[0]
    smallest = min(result.plan.best)
    best = max((r for r in result.plan.configs if r.method == "eagle3" and r.batch_size == smallest),
               key=lambda r: r.tokens_per_second)
    return next(p for p in probes if (p.config["steps"], p.config["topk"], p.config["num_draft_tokens"])
                == (best.steps, best.topk, best.num_draft_tokens))


def _free_entries(result: AssessResult) -> list[ModelFreeEntry]:
    """The model-free baselines that drafted at all, as plan candidates."""
    return [ModelFreeEntry(m.method, m.options["num_speculative_tokens"], m.mean_accept_length, m.mean_drafted,
                           f"assess {m.method}") for m in result.model_free if m.num_cycles]


def _plan(result: AssessResult, run: _Run) -> None:
    """The plan on the profile (measured here unless given) with the model-free candidates, and the plan at
    the accept lengths on OLD (the same costs: OLD is the same architecture)."""
    configs, batch_sizes = run.configs, run.batch_sizes
    free = _free_entries(result)
    result.profile = run.given_costs or result.profile
    assert result.profile is not None
    accept = [probe_accept_length(c, r, run.prompts) for c, r in zip(configs, result.probes or [])]
    entries = [GridEntry(c) for c in configs]
    result.plan = make_plan(result.profile, accept, grid=entries, batch_sizes=list(batch_sizes),
                            model_free=[m for m in free if _in_range(result.profile, m, batch_sizes)],
                            mtp=_mtp_accept(result, run))
    if result.old_probes is not None:
        old = [AcceptLength(c, r.mean_accept_length, source=f"probe {c.label} on OLD")
               for c, r in zip(configs, result.old_probes)]
        result.old_plan = make_plan(result.profile, old, grid=entries, batch_sizes=list(batch_sizes))


def _mtp_accept(result: AssessResult, run: _Run) -> list[AcceptLength]:
    """The MTP head's accept lengths for the plan, where the profile priced its passes (a given one may not)."""
    if not result.mtp_probes or run.mtp is None:
        return []
    assert result.profile is not None
    if not result.profile.mtp_draft_extend:
        result.mtp_note = (f"the MTP head was probed but not priced: {run.costs} holds no MTP pass; profile it "
                           "with draftlab profile --drafter mtp and give that profile as --costs")
        return []
    heads = CostTable.of(result.profile, mtp=True)
    priced, unpriced = [], []
    for c, r in zip(run.mtp.configs, result.mtp_probes):
        try:  # a given profile may not reach every size the head's configs need
            for b in run.batch_sizes:
                heads.cycle(b, c, r.mean_accept_length)
        except DraftlabError:
            unpriced.append(c.label)
            continue
        priced.append(AcceptLength(c, r.mean_accept_length, source=f"assess: probe of mtp {c.label}", method="mtp"))
    if unpriced:
        result.mtp_note = (f"mtp {', '.join(unpriced)} probed but not priced: {run.costs} did not measure the MTP "
                           "head's passes at the sizes they need (profile --drafter mtp with them)")
    return priced


def _schedule(result: AssessResult, engine: str, version: str | None) -> None:
    """The plan's draft length per batch-size range in the engine's own format (``plan --schedule``'s
    object), or the reason there is none: a release without the feature, no chain in the grid, or
    speculation losing at every planned batch size."""
    try:
        written = engine_schedule(result.plan, engine, version)
    except DraftlabError as exc:
        result.schedule_note = str(exc)
        return
    result.schedule, result.schedule_plan = written.value, written.summary()


def _steps(progress: bool, device: str) -> Any:
    """``step(name)`` starts the next phase: one line on stderr with the time so far, whether or not it is a
    terminal (a run of minutes must say where it is when its output goes to a file); the first says how
    many CPU threads torch computes with, and why."""
    start = time.perf_counter()

    def step(name: str) -> None:
        if progress:
            print(f"assess: {name} ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)

    if device == "cpu":
        count = torch.get_num_threads()
        step(f"{count} CPU thread{'s' * (count != 1)} ({provenance()['threads_from'] or 'torch default'})")
    return contextlib.nullcontext(step)


def _same_architecture(old: str | Path, new: str | Path) -> None:
    """OLD must be an earlier version of NEW: drift and the shared costs compare like with like."""
    a, b = (TargetConfig.from_dict(open_checkpoint(p).config) for p in (old, new))
    for name in ("architecture", "hidden_size", "num_layers", "vocab_size"):
        if getattr(a, name) != getattr(b, name):
            raise DraftlabError(f"its {name} is {getattr(a, name)!r} but --target's is {getattr(b, name)!r}; "
                                "--old-target is the drafter's training target, an earlier version of --target",
                                path=old)


def _codes(fixed: FixResult | None) -> list[str]:
    return [] if fixed is None else list(dict.fromkeys(f.code for f in fixed.fixed))


def _coverage(pair: LoadedPair, drafter: Path, decoded: Decoded) -> tuple[CoverageResult, TokenCounts]:
    """The draft vocabulary over the tokens the walks cover (what ``vocab coverage`` gives on these counts)."""
    vocab = pair.target.config.vocab_size
    dense = torch.zeros(vocab, dtype=torch.int64)
    for cont, n in zip(decoded.continuations, decoded.max_new_tokens):
        dense += torch.bincount(torch.tensor(cont[:n], dtype=torch.int64), minlength=vocab)
    counts = TokenCounts.from_dense(dense.numpy(), {"source": "assess: the target's continuations"})
    return coverage(VocabMapping.from_drafter(drafter), counts, source="the target's continuations"), counts


def _model_free(run: _Run, decoded: Decoded, eos: set[int]
                ) -> tuple[list[ModelFreeResult], dict[str, list[Sequence[int]]]]:
    """Each method of ``run.model_free``: its accept lengths on the continuations, prompts served in file order."""
    ngram, suffix = run.ngram, run.suffix
    methods: list[tuple[str, dict[str, Any], Callable[[Sequence[int]], modelfree.Drafter], str]] = [
        ("ngram", {"prompt_lookup_min": ngram.prompt_lookup_min, "prompt_lookup_max": ngram.prompt_lookup_max,
                   "num_speculative_tokens": ngram.num_speculative_tokens}, ngram.start,
         "vllm/v1/spec_decode/ngram_proposer.py"),
        ("suffix", {"num_speculative_tokens": suffix.num_speculative_tokens,
                    "suffix_decoding_max_tree_depth": suffix.max_tree_depth,
                    "suffix_decoding_max_spec_factor": suffix.max_spec_factor,
                    "suffix_decoding_min_token_prob": suffix.min_token_prob},
         modelfree.SuffixCache(suffix).start, "vllm/v1/spec_decode/suffix_decoding.py + arctic_inference 0.1.1"),
    ]
    results, cycles = [], {}
    for method, options, start, source in methods:
        if method not in run.model_free:
            continue
        walked = modelfree.assess(decoded.prompts, decoded.continuations, start, decoded.max_new_tokens,
                                  frozenset(eos))
        drafted = [d for r in walked.results for d in r.drafted]
        results.append(ModelFreeResult(method, options, walked.mean_accept_length,
                                       sum(drafted) / len(drafted) if drafted else 0.0, len(drafted), source))
        cycles[f"{method} k={options['num_speculative_tokens']}"] = [r.accept_lengths for r in walked.results]
    return results, cycles


def _drift(old: LoadedPair, new: LoadedPair, run: _Run) -> DriftResult:
    """``drift --target-a OLD --target-b NEW --layers <the drafter's aux layers>`` on the loaded targets."""
    assert run.old_target is not None
    sequences = drift_sequences(run.prompts, run.old_target, old.target.config)
    layers, tokens = compare_targets(old.target, new.target, sequences, old.aux_layers)
    return DriftResult(
        config={"target_a": str(run.old_target), "target_b": str(run.target), "drafter": None, "engine": run.engine,
                "layers": old.aux_layers, "dtype": run.dtype, "device": run.device,
                "num_sequences": len(sequences)},
        layers=layers, next_token_agreement=tokens.agreement, kl=tokens.kl, num_positions=tokens.n)


def _profile(run: _Run, pair: LoadedPair, drafter: Path, free: list[ModelFreeEntry], head: LoadedPair | None
             ) -> Profile:
    """What ``plan --target`` measures, plus the verify sizes the model-free candidates need (the bonus position
    and the tokens they propose on average, rounded up) and the MTP head's passes."""
    verify, rows, extend = profile_sizes(run.configs)
    verify = sorted({*verify, *(math.ceil(1 + m.drafted) for m in free)})
    workload = runtime_workload(pair.target, pair.drafter, context_tokens=run.context_tokens,
                                target_name=str(run.target), drafter_name=str(drafter),
                                mtp=None if head is None else (head.target, head.drafter))  # type: ignore[arg-type]
    return profile_costs(workload, batch_sizes=sorted(set(run.batch_sizes)), verify_tokens=verify, draft_rows=rows,
                         extend_tokens=extend, warmup=run.warmup, repeats=run.repeats, progress=run.progress)


def _in_range(profile: Profile, entry: ModelFreeEntry, batch_sizes: Sequence[int]) -> bool:
    """A given profile may not reach a model-free verify's size; such a candidate is left out of the plan."""
    measured = [m.tokens for m in profile.verify if m.batch_size in batch_sizes]
    return bool(measured) and min(measured) <= 1 + entry.drafted <= max(measured)


def _slices(configs: list[SpecConfig], probes: list[ProbeResult], old: list[ProbeResult] | None,
            free: dict[str, list[Sequence[int]]], lens: dict[int, int], categories: dict[int, str | None],
            max_new_tokens: int) -> dict[str, dict[str, dict[str, Slice]]]:
    """Every accept length per category and per context bucket (``lens``: each prompt's length by index), the
    buckets of every call alike for a run's prompts and ``max_new_tokens``."""
    width = context_width(list(lens.values()), max_new_tokens)
    out = {}
    for c, r in zip(configs, probes):
        out[c.label] = slices([Cycles(categories[p.prompt_index], lens[p.prompt_index], p.accept_lengths)
                               for p in r.results], width)
    for c, r in zip(configs, old or []):
        out[f"{c.label} on OLD"] = slices([Cycles(categories[p.prompt_index], len_, p.accept_lengths)
                                            for p in r.results
                                            for len_ in [lens.get(p.prompt_index, 0)]], width)
    for label, per_prompt in free.items():
        out[label] = slices([Cycles(categories[i], n, lengths) for (i, n), lengths in zip(lens.items(), per_prompt)],
                            width)
    return out


def _write(result: AssessResult, tmp: Path, out: Path) -> None:
    """assess.json and each sub-result as its command writes it (beside the continuations and counts the probe
    part wrote), and the page once there is a verdict; paths under the temporary folder named as they will
    be once it becomes ``out``."""
    named: dict[str, Any] = {
        "inspect.json": result.inspect, "check.json": result.check, "fix.json": result.fix,
        "vocab-coverage.json": result.coverage, "probe.json": result.probes, "probe-old.json": result.old_probes,
        "probe-mtp.json": result.mtp_probes, "drift.json": result.drift, "profile.json": result.profile,
        "plan.json": result.plan or result.engine_estimate,
    }
    parts = {name: obj for name, obj in named.items() if obj is not None}
    page = [] if result.verdict is None else ["report.html"]
    result.files = {name: str(out / name) for name in ["assess.json", *page, *parts]}
    if result.schedule is not None:
        result.files["schedule.json"] = str(out / "schedule.json")
        (tmp / "schedule.json").write_text(dumps(result.schedule))
    for name in ("continuations.jsonl", "vocab-counts.json", "speculation_profile.json"):
        if (tmp / name).exists():
            result.files[name] = str(out / name)
    here, there = str(tmp), str(out)
    for name, obj in parts.items():
        doc = document(obj) if name != "profile.json" else {"format": PROFILE_FORMAT, **to_jsonable(obj)}
        (tmp / name).write_text(json.dumps(doc, indent=2).replace(here, there) + "\n")
    (tmp / "assess.json").write_text(json.dumps(assess_document(result), indent=2).replace(here, there) + "\n")
    if result.verdict is None:
        return  # a partial result: no page until the verdict
    from draftlab.report.html.report import make_report

    # a plan from timings that contradict each other would headline a winner the verdict refuses to pick: DIR
    # keeps it, the page does not show it
    shown = [name for name in parts if name != "plan.json" or not _contradictions(result)[0]]
    sections = [tmp / "assess.json", *(tmp / name for name in shown)]
    make_report(sections, tmp / "report.html", title=result.verdict.headline)
    html = tmp / "report.html"
    html.write_text(html.read_text().replace(here, there))


def assess_document(result: AssessResult) -> dict[str, Any]:
    """assess.json: the verdict first, then every sub-result as its command prints it."""
    doc = document(result)
    return {"format": "draftlab-assess/1", "verdict": doc.pop("verdict"), "partial": bool(result.missing), **doc}
