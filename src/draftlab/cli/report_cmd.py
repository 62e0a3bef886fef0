"""``draftlab report``: any mix of draftlab's JSON results as one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from draftlab.cli.app import app
from draftlab.cli.output import JsonOption, emit_json
from draftlab.console import console
from draftlab.fsutil import refuse_overlap


@app.command("report")
def report(
    results: Annotated[list[Path], typer.Argument(help="Result JSON files (--json output, bench -o, sweep.json, "
                                                       "train_log.jsonl), in the order to show them.")],
    out: Annotated[Path, typer.Option("-o", "--output", help="The HTML page to write.")] = Path("report.html"),
    title: Annotated[str, typer.Option("--title", help="The page's title.")] = "draftlab report",
    json_out: JsonOption = False,
) -> None:
    """One HTML page of draftlab results: findings as headings, figures, tables, and the command behind each."""
    from draftlab.report.html.report import make_report

    refuse_overlap(out, {"a result file": results})
    result = make_report(results, out, title)
    if json_out:
        emit_json(result)
        return
    for s in result.sections:
        console.print(f"  [dim]{s['kind']:>14}[/]  {s['heading']}", markup=True, highlight=False)
    console.print(f"wrote {result.out} ({len(result.sections)} results)")
