"""``draftlab generate``: speculative decoding over a prompts file, with accept lengths."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one
from draftlab.cli.common import lower_on_oom
from draftlab.cli.deployed import EngineChoice, engine_choice
from draftlab.cli.groups import grouped
from draftlab.cli.options import (
    DrafterOption,
    NumDraftTokensOption,
    SamplingSeedOption,
    StepsOption,
    TargetOption,
    TemperatureOption,
    TopkOption,
)
from draftlab.cli.output import JsonOption, show
from draftlab.cli.placement import Placement, ThreadsOption, placement


@app.command("generate")
@grouped
def generate_command(
    target: TargetOption,
    prompts: Annotated[Path, typer.Option("--prompts", help="JSONL: one of input_ids, prompt or messages a line.")],
    drafter: DrafterOption = None,
    steps: StepsOption = None,
    topk: TopkOption = None,
    num_draft_tokens: NumDraftTokensOption = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", callback=at_least_one,
        help="Tokens to generate per prompt.")] = 128,
    temperature: TemperatureOption = 0.0,
    seed: SamplingSeedOption = None,
    no_draft: Annotated[bool, typer.Option("--no-draft", help="Decode with the target alone (baseline).")] = False,
    where: Placement = placement(),
    asked: EngineChoice = engine_choice(),
    batch_size: Annotated[int, typer.Option(
        "--batch-size", callback=at_least_one,
            help="Prompts decoded together (1: one at a time, the fastest path per prompt).")] = 1,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Always generate --max-new-tokens tokens.")] = False,
    json_out: JsonOption = False,
    threads: ThreadsOption = None,
) -> None:
    """Run real speculative decoding (SGLang's tree, lossless verification) and report accept lengths.
    --drafter mtp drafts with the target's own MTP layer, as --engine serves it."""
    from draftlab.engines.mtp_head import MtpServing
    from draftlab.models.mtp import names_mtp

    mtp = MtpServing(asked.engine, asked.version) if names_mtp(drafter) and not no_draft else None
    deployment = None if drafter is None or no_draft or mtp else asked.resolve(target, drafter)
    from draftlab.decode.generate import generate
    from draftlab.report.generate import render_generate

    with lower_on_oom(batch_size=batch_size, max_new_tokens=max_new_tokens):
        result = generate(
            target, drafter, prompts, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens,
            max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, no_draft=no_draft,
            **where.loading(), deployment=deployment, progress=not json_out,
            batch_size=batch_size, ignore_eos=ignore_eos, mtp=mtp,
        )
    if deployment is None and mtp is None:  # no drafter: the engine asked for, nothing captured
        result.config.update(asked.describe())
    show(result, json_out, render_generate)
