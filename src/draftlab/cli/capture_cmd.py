"""``draftlab capture``: aux and final hidden states of a dataset, into feature files train and probe read."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one
from draftlab.cli.common import main_process, parse_layer_ids
from draftlab.cli.deployed import EngineChoice, engine_choice
from draftlab.cli.groups import grouped
from draftlab.cli.options import TargetOption
from draftlab.cli.output import JsonOption, emit_json
from draftlab.cli.placement import Placement, ThreadsOption, placement
from draftlab.console import console


@app.command("capture")
@grouped
def capture_command(
    target: TargetOption,
    data: Annotated[Path, typer.Option("--data", help="JSONL as vocab count reads it.")],
    out: Annotated[Path, typer.Option("--out", help="New folder of SpecForge-layout data_{i}.ckpt files.")],
    drafter: Annotated[Optional[Path], typer.Option(
        "--drafter", help="Capture the aux layers this drafter reads (in --engine's convention).")] = None,
    aux_layers: Annotated[Optional[str], typer.Option(
        "--aux-layers", help="Target layers a,b,c to capture (default: the engines' default).")] = None,
    asked: EngineChoice = engine_choice(window=False),
    seq_len: Annotated[int, typer.Option("--seq-len", callback=at_least_one,
        help="Tokens per row (longer rows are cut).")] = 2048,
    batch_size: Annotated[int, typer.Option("--batch-size", callback=at_least_one, help="Rows per target pass.")] = 4,
    shard: Annotated[int, typer.Option("--shard", callback=at_least_one, help="Files per rows_* folder.")] = 2000,
    resume: Annotated[bool, typer.Option("--resume", help="Finish an interrupted capture in --out.")] = False,
    where: Placement = placement(dtype="float32"),
    json_out: JsonOption = False,
    threads: ThreadsOption = None,
) -> None:
    """Capture a dataset's hidden states for train --features and probe --features (resumable, sharded)."""
    deployment = None if drafter is None else asked.resolve(target, drafter)
    from draftlab.train.capture import capture

    layers = None if aux_layers is None else parse_layer_ids(aux_layers)
    result = capture(target, data, out, drafter=drafter, aux_layers=layers,
                     deployment=deployment, seq_len=seq_len, batch_size=batch_size, shard=shard, resume=resume,
                     **where.loading(), progress=not json_out)
    if not main_process():
        return
    if json_out:
        emit_json(result)
    else:
        console.print(f"[bold]{result.out}[/]: {result.rows} rows, aux layers {result.aux_layers}; "
                      f"{result.written} files written, {result.skipped} already there.")
