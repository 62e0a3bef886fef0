"""``draftlab assess``: the go/no-go of a drafter on a (new) target, in one command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one, check_device, checked, non_negative, positive, share
from draftlab.cli.common import lower_on_oom, parse_ints
from draftlab.cli.deployed import EngineChoice, engine_choice
from draftlab.cli.groups import grouped
from draftlab.cli.output import JsonOption, show
from draftlab.cli.placement import Placement, ThreadsOption, placement
from draftlab.errors import DraftlabError
from draftlab.fsutil import refuse_overlap


@app.command("assess")
@grouped
def assess_command(
    drafter: Annotated[Path, typer.Option("--drafter", help="The EAGLE-3 drafter folder.")],
    target: Annotated[Path, typer.Option("--target", help="The target to serve it with (the new version).")],
    prompts: Annotated[Path, typer.Option("--prompts", help="JSONL prompts (an optional \"category\" field slices "
                                                            "the figures).")],
    old_target: Annotated[Optional[Path], typer.Option(
        "--old-target", help="The target the drafter was trained for: drift and the accept length there.")] = None,
    engine: Annotated[str, typer.Option("--engine", help="sglang or vllm: whose loading rules apply.")] = "sglang",
    engine_version: Annotated[Optional[str], typer.Option(
        "--engine-version", help="The engine release whose rules apply: any version resolves to the newest release "
        "draftlab knows at or below it (default: the newest).")] = None,
    asked: EngineChoice = engine_choice(),
    grid: Annotated[Optional[str], typer.Option(
        help="Configs to probe and plan, steps/topk/num_draft_tokens (default: plan's grid).")] = None,
    batch_sizes: Annotated[str, typer.Option(help="Batch sizes to plan.")] = "1,8,32,64",
    costs: Annotated[Optional[Path], typer.Option(
        help="PROFILE.json from draftlab profile (default: profile the pair here).")] = None,
    ngram: Annotated[str, typer.Option(
        help="vLLM ngram baseline: prompt_lookup_min,prompt_lookup_max,num_speculative_tokens.")] = "5,5,4",
    model_free: Annotated[str, typer.Option(
        "--model-free", help="Model-free baselines to simulate: ngram, suffix, both, or none.")] = "ngram,suffix",
    baseline_tps: Annotated[Optional[float], typer.Option(callback=positive, help="Engine: tokens/s without speculation.")] = None,
    decode_ms: Annotated[Optional[float], typer.Option(callback=positive, help="Engine: decode step in ms.")] = None,
    spec_tps: Annotated[Optional[float], typer.Option(callback=positive, help="Engine: tokens/s with speculation.")] = None,
    cycle_ms: Annotated[Optional[float], typer.Option(callback=positive, help="Engine: speculative cycle in ms.")] = None,
    accept_length: Annotated[Optional[float], typer.Option(
        callback=checked(minimum=1), help="Engine: mean accept length it measured (bonus included).")] = None,
    allreduce_ms: Annotated[Optional[float], typer.Option(callback=non_negative, help="Engine: all-reduce ms per cycle.")] = None,
    allreduce_share: Annotated[Optional[float], typer.Option(callback=share, help="Engine: all-reduce share of a cycle.")] = None,
    batch_size: Annotated[int, typer.Option(callback=at_least_one, help="Engine: the batch size of its numbers.")] = 1,
    max_new_tokens: Annotated[int, typer.Option(callback=at_least_one, help="Continuation tokens per prompt.")] = 128,
    out: Annotated[Path, typer.Option("--out", help="New folder for assess.json, report.html and every "
                                                    "sub-result.")] = Path("draftlab-assess"),
    resume: Annotated[bool, typer.Option("--resume", help="--out is the folder an interrupted assess left (Ctrl-C "
                                                          "keeps what finished): run only what it misses, with the "
                                                          "same options.")] = False,
    where: Placement = placement(device_map=False),
    device: Annotated[Optional[str], typer.Option(callback=check_device,
                                                  help="cpu, cuda or cuda:N (default cuda when available).")] = None,
    threads: ThreadsOption = None,
    json_out: JsonOption = False,
) -> None:
    """Inspect, check (and fix), probe, compare with OLD, the model-free methods and the target's own MTP head
    (where the release serves one), plan: then say what to do."""
    from draftlab.models.mtp import MTP

    if str(drafter) == MTP and not drafter.is_dir():
        raise DraftlabError("--drafter mtp: assess weighs an EAGLE-3 drafter; the target's own MTP head joins it as a "
                            "candidate wherever the release serves one (probe --drafter mtp measures the head alone)")
    refuse_overlap(out, {"--drafter": drafter, "--target": target, "--prompts": prompts, "--old-target": old_target,
                         "--costs": costs}, folder=True)
    if out.exists() and not resume:
        raise DraftlabError("already exists; assess writes a new folder, give another --out (or --resume to finish "
                            "an interrupted one)", path=out)
    from draftlab.assess.render import render_assess
    from draftlab.assess.run import assess, assess_document, parse_model_free
    from draftlab.cost.plan import parse_grid
    from draftlab.probe.modelfree import Ngram

    try:
        lookup = [int(v) for v in ngram.split(",")]
    except ValueError:
        lookup = []
    if len(lookup) != 3:
        raise DraftlabError(f"--ngram takes prompt_lookup_min,prompt_lookup_max,num_speculative_tokens, e.g. 5,5,4; "
                            f"got {ngram!r}")
    try:
        ngram_options = Ngram(*lookup)
    except ValueError as exc:
        raise DraftlabError(f"--ngram {ngram}: {exc}") from None
    entries = parse_grid(grid) if grid else None
    if entries and any(e.accept_length is not None for e in entries):
        raise DraftlabError("--grid: assess measures every accept length; drop the ':AL' parts")
    numbers = {"baseline_tps": baseline_tps, "decode_ms": decode_ms, "spec_tps": spec_tps, "cycle_ms": cycle_ms,
               "accept_length": accept_length, "allreduce_ms": allreduce_ms, "allreduce_share": allreduce_share}
    with lower_on_oom(batch_sizes=batch_sizes, max_new_tokens=max_new_tokens):
        result = assess(drafter, target, prompts, out, old_target=old_target, engine=engine,
                        engine_version=engine_version, draft_window=asked.draft_window, grid=None if entries is None else [e.config for e in entries],
                        batch_sizes=parse_ints("--batch-sizes", batch_sizes), costs=costs, max_new_tokens=max_new_tokens,
                        ngram=ngram_options, model_free=parse_model_free(model_free),
                        engine_numbers={k: v for k, v in numbers.items() if v is not None}, engine_batch_size=batch_size,
                        dtype=where.dtype, device=where.device, resume=resume)
    show(result, json_out, render_assess, as_json=assess_document)
