"""``draftlab generate``: speculative decoding over a prompts file, with accept lengths."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one
from draftlab.cli.common import lower_on_oom
from draftlab.cli.options import (
    EngineOption, NumDraftTokensOption, SamplingSeedOption, StepsOption, TargetOption, TemperatureOption, TopkOption,
)
from draftlab.cli.output import JsonOption, show
from draftlab.cli.placement import DeviceMapOption, DeviceOption, DtypeOption, Placement, ThreadsOption


@app.command("generate")
def generate_command(
    target: TargetOption,
    prompts: Annotated[Path, typer.Option("--prompts", help="JSONL: one of input_ids, prompt or messages a line.")],
    drafter: Annotated[Optional[Path], typer.Option("--drafter", help="EAGLE-3 drafter folder.")] = None,
    steps: StepsOption = None,
    topk: TopkOption = None,
    num_draft_tokens: NumDraftTokensOption = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", callback=at_least_one,
        help="Tokens to generate per prompt.")] = 128,
    temperature: TemperatureOption = 0.0,
    seed: SamplingSeedOption = None,
    no_draft: Annotated[bool, typer.Option("--no-draft", help="Decode with the target alone (baseline).")] = False,
    dtype: DtypeOption = None,
    device: DeviceOption = None,
    device_map: DeviceMapOption = None,
    engine: EngineOption = "sglang",
    batch_size: Annotated[int, typer.Option(
        "--batch-size", callback=at_least_one,
            help="Prompts decoded together (1: one at a time, the fastest path per prompt).")] = 1,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Always generate --max-new-tokens tokens.")] = False,
    json_out: JsonOption = False,
    threads: ThreadsOption = None,
) -> None:
    """Run real speculative decoding (SGLang's tree, lossless verification) and report accept lengths."""
    where = Placement.of(dtype, device, device_map, threads)
    from draftlab.report.generate import render_generate
    from draftlab.decode.generate import generate

    with lower_on_oom(batch_size=batch_size, max_new_tokens=max_new_tokens):
        result = generate(
            target, drafter, prompts, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens,
            max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, no_draft=no_draft,
            **where.loading(), engine=engine, progress=not json_out,
            batch_size=batch_size, ignore_eos=ignore_eos,
        )
    show(result, json_out, render_generate)
