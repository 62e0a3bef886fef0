"""``draftlab drift``: how far a new target version has moved from the one a drafter was trained on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one
from draftlab.cli.common import lower_on_oom
from draftlab.cli.deployed import EngineChoice, engine_choice
from draftlab.cli.groups import grouped
from draftlab.cli.options import NumDraftTokensOption, StepsOption, TopkOption
from draftlab.cli.output import JsonOption, show
from draftlab.cli.placement import Placement, ThreadsOption, placement
from draftlab.errors import DraftlabError


@app.command("drift")
@grouped
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
    where: Placement = placement(device="cpu", device_map=False),
    engine: Annotated[str, typer.Option("--engine", help="Aux-layer convention of the drafter config.")] = "sglang",
    asked: EngineChoice = engine_choice(),
    json_out: JsonOption = False,
    threads: ThreadsOption = None,
) -> None:
    """Per-layer cosine, relative L2 and CKA of the hidden states; next-token agreement and KL."""
    deployment = None if drafter is None else asked.resolve(target_a, drafter)
    from draftlab.probe.drift import drift
    from draftlab.report.drift import render_drift

    with lower_on_oom(batch_size=batch_size, max_new_tokens=max_new_tokens):
        result = drift(target_a, target_b, prompts, layers=_parse_layers(layers), drafter=drafter,
                       max_new_tokens=max_new_tokens, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens,
                       batch_size=batch_size, dtype=where.dtype, device=where.device,
                       deployment=deployment, progress=not json_out)
    if deployment is None:  # no drafter: the engine asked for, nothing captured for one
        result.config.update(asked.describe())
    show(result, json_out, render_drift)


def _parse_layers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise DraftlabError(f"--layers must be comma-separated integers like 1,15,28; got {text!r}") from None
