"""Terminal rendering of ``sweep`` (rich): the engine commands of a dry run, and the summary table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from draftlab.report.format import fmt

if TYPE_CHECKING:
    from draftlab.bench.sweep import SweepPlan, SweepResult


def render_sweep_plan(plan: SweepPlan, console: Console, err_console: Console) -> None:
    """Each entry's environment and shell command; the notes go to ``err_console`` so stdout holds only those."""
    for index, planned in enumerate(plan.entries, start=1):
        e = planned.entry
        console.print(f"[bold]{index}. {e.label} at batch {e.batch}[/bold]")
        for key, value in planned.command.env.items():
            console.print(f"  env {key}={value}", markup=False)
        console.print(f"  {planned.command.shell}", soft_wrap=True, markup=False)
    console.print(f"bench: --api {plan.api}, engine cap {plan.max_running_requests} running requests on every entry")
    for note in plan.notes:
        err_console.print(f"  note: {note}", markup=False, soft_wrap=True)


def render_sweep(result: SweepResult, console: Console) -> None:
    """One row per entry (speedup over the baseline at its batch), each failure's error and the files written."""
    from draftlab.bench.sweep import SUMMARY_NAME

    table = Table(title=f"{result.engine} sweep, bench --api {result.api}", show_edge=False)
    predicted = any(r.predicted_throughput is not None for r in result.rows)
    columns = ["config", "batch", "accept len", "tok/s", *(["predicted", "error"] if predicted else []), "speedup",
               "TTFT p50 ms", "TPOT p50 ms", "ok/failed"]
    for col in columns:
        table.add_column(col, justify="left" if col == "config" else "right")
    for r in result.rows:
        vs = [fmt(r.predicted_throughput), "-" if r.prediction_error is None else f"{r.prediction_error:+.1%}"]
        table.add_row(r.config, str(r.batch), fmt(r.accept_length, ".3f"), fmt(r.output_throughput),
                      *(vs if predicted else []), "-" if r.speedup is None else f"{r.speedup:.2f}x",
                      fmt(r.ttft_p50_ms), fmt(r.tpot_p50_ms, ".2f"),
                      "[red]failed[/red]" if r.error else f"{r.completed}/{r.failed}")
    console.print(table)
    for r in result.rows:
        if r.error:
            console.print(f"[red]{r.config} at batch {r.batch}[/red]: {escape(r.error)}", soft_wrap=True)
    folder = Path(result.out_dir)
    console.print(f"wrote {folder / SUMMARY_NAME}" + (f" and {folder / result.plot}" if result.plot else ""))
