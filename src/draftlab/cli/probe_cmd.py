"""``draftlab probe``: exact greedy accept lengths from one target pass, no serving engine (under
``torchrun``, the prompts shared out among the ranks)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one, non_negative
from draftlab.cli.common import lower_on_oom, main_process
from draftlab.cli.deployed import EngineChoice, engine_choice
from draftlab.cli.groups import grouped
from draftlab.cli.options import (
    DrafterOption,
    NumDraftTokensOption,
    SamplingSeedOption,
    StepsOption,
    TargetOption,
    TopkOption,
)
from draftlab.cli.output import JsonOption, show
from draftlab.cli.placement import Placement, ThreadsOption, placement
from draftlab.console import err_console


@app.command("probe")
@grouped
def probe_command(
    target: TargetOption,
    drafter: DrafterOption,
    prompts: Annotated[Optional[Path], typer.Option(
        "--prompts", help="JSONL: one of input_ids, prompt or messages a line (plus response_ids with "
                          "--responses given).")] = None,
    features: Annotated[Optional[Path], typer.Option(
        "--features", help="Hidden states captured by an engine (SpecForge data_*.ckpt, speculators data_*.pt or "
                           "hs_*.safetensors) instead of running the target; --target then gives only its config, "
                           "embedding and lm_head.")] = None,
    steps: StepsOption = None,
    topk: TopkOption = None,
    num_draft_tokens: NumDraftTokensOption = None,
    max_new_tokens: Annotated[int, typer.Option(
        "--max-new-tokens", callback=at_least_one,
            help="Continuation tokens per prompt (a given response is cut to this).")] = 128,
    responses: Annotated[str, typer.Option(
        "--responses", help="generate: the target's greedy continuation; given: response_ids from the file.")
    ] = "generate",
    temperature: Annotated[float, typer.Option(
        "--temperature", callback=non_negative,
            help="0: exact greedy accept lengths. > 0: expected acceptance, an estimate.")] = 0.0,
    seed: SamplingSeedOption = None,
    batch_size: Annotated[Optional[int], typer.Option(
        "--batch-size", callback=at_least_one,
            help="Sequences decoded and probed together (default: as many as free GPU memory holds, "
                             "up to 64; 4 on the CPU).")] = None,
    where: Placement = placement(),
    asked: EngineChoice = engine_choice(),
    profile_out: Annotated[Optional[Path], typer.Option(
        "--profile-out", help="Also write the per-position acceptance profile here (ModelOpt's "
                              "speculation_profile.json schema; per prompt category when rows carry one).")] = None,
    json_out: JsonOption = False,
    threads: ThreadsOption = None,
) -> None:
    """Exact offline accept lengths: what greedy speculative decoding would accept on this data.
    --drafter mtp probes the target's own MTP layer, as --engine serves it."""
    categories = None
    if profile_out is not None:
        from draftlab.decode.prompts import read_categories
        from draftlab.fsutil import local_inputs, refuse_overlap

        refuse_overlap(profile_out, {**local_inputs(target=target, drafter=drafter, features=features),
                                     "--prompts": prompts})
        categories = read_categories(prompts) if prompts is not None else None
    from draftlab.engines.mtp_head import MtpServing
    from draftlab.models.mtp import names_mtp

    mtp = MtpServing(asked.engine, asked.version) if names_mtp(drafter) else None
    deployment = None if mtp else asked.resolve(target, drafter)
    from draftlab.distributed import leave
    from draftlab.probe.probe import probe
    from draftlab.report.probe import render_probe

    try:
        with lower_on_oom(batch_size="auto" if batch_size is None else batch_size, max_new_tokens=max_new_tokens):
            result = probe(target, drafter, prompts, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens,
                           max_new_tokens=max_new_tokens, responses=responses, features=features,
                           temperature=temperature, seed=seed, batch_size=batch_size, **where.loading(),
                           deployment=deployment, progress=not json_out, mtp=mtp)
    finally:
        leave()
    if not main_process():  # torchrun: every rank holds the result; rank 0 prints it
        return
    if profile_out is not None:
        from draftlab.acceptance.profile import write_profile
        from draftlab.probe.to_profile import profile_from_probe

        write_profile(profile_from_probe(result, prompts=prompts, categories=categories), profile_out)
        if not json_out:
            err_console.print(f"acceptance profile written to {profile_out}", markup=False)
    show(result, json_out, render_probe)
