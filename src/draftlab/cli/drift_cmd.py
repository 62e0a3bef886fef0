"""``draftlab drift``: how far a new target version has moved from the one a drafter was trained on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one
from draftlab.cli.common import lower_on_oom
from draftlab.cli.options import NumDraftTokensOption, StepsOption, TopkOption
from draftlab.cli.output import JsonOption, show
from draftlab.cli.placement import DefaultedDeviceOption, DtypeOption, Placement, ThreadsOption
from draftlab.errors import DraftlabError


@app.command("drift")
def drift_command(
    target_a: Annotated[Path, typer.Option("--target-a", help="The reference target (the drafter's training target).")],
    target_b: Annotated[Path, typer.Option("--target-b", help="The new target version.")],
    prompts: Annotated[Path, typer.Option(
        "--prompts", help="JSONL prompts (response_ids, when present, are appended).")],
    layers: Annotated[Optional[str], typer.Option(
        "--layers", help="Comma-separated canonical layer ids (output of layer k). Default: the drafter's aux "
                         "layers with --drafter, else every layer.")] = None,
    drafter: Annotated[Optional[Path], typer.Option(
        "--drafter", help="Also probe this drafter's accept length on both targets.")] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", callback=at_least_one,
        help="Probe continuation length.")] = 128,
    steps: StepsOption = None,
    topk: TopkOption = None,
    num_draft_tokens: NumDraftTokensOption = None,
    batch_size: Annotated[int, typer.Option("--batch-size", callback=at_least_one, help="Sequences per pass.")] = 4,
    dtype: DtypeOption = None,
    device: DefaultedDeviceOption = "cpu",
    engine: Annotated[str, typer.Option("--engine", help="Aux-layer convention of the drafter config.")] = "sglang",
    json_out: JsonOption = False,
    threads: ThreadsOption = None,
) -> None:
    """Per-layer cosine, relative L2 and CKA of the hidden states; next-token agreement and KL."""
    where = Placement.of(dtype, device, threads=threads)
    from draftlab.probe.drift import drift
    from draftlab.report.drift import render_drift

    with lower_on_oom(batch_size=batch_size, max_new_tokens=max_new_tokens):
        result = drift(target_a, target_b, prompts, layers=_parse_layers(layers), drafter=drafter,
                       max_new_tokens=max_new_tokens, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens,
                       batch_size=batch_size, dtype=where.dtype, device=where.device, engine=engine,
                       progress=not json_out)
    show(result, json_out, render_drift)


def _parse_layers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise DraftlabError(f"--layers must be comma-separated integers like 1,15,28; got {text!r}") from None
