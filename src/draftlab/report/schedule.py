"""Terminal rendering of a speculation schedule (rich): the draft length per batch-size range."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from draftlab.engines.schedule import NAMES, EngineSchedule


def render_schedule(written: EngineSchedule, console: Console, out: Path | None = None) -> None:
    """One row per planned batch size (its range, K, predicted tok/s and speedup), then the notes."""
    table = Table(title=f"Draft length per batch size for {NAMES[written.engine]} {written.version}")
    for col in ("batches", "planned at", "draft tokens", "tok/s", "speedup"):
        table.add_column(col, justify="right")
    for r in written.plan.ranges if written.plan else []:
        table.add_row(f"{r.lo}-{r.hi}", str(r.planned_batch), "off" if r.draft_length == 0 else str(r.draft_length),
                      f"{r.tokens_per_second:.1f}", f"{r.speedup:.2f}x", style="dim" if r.draft_length == 0 else None)
    console.print(table)
    if written.plan is not None:
        console.print(f"between planned sizes: {written.plan.rule}", markup=False)
    console.print(f"{written.engine}: {json.dumps(written.value)}", markup=False, soft_wrap=True)
    for note in written.notes:
        console.print(f"note: {note}", markup=False)
    if out is not None:
        console.print(f"schedule: {out}", markup=False)
