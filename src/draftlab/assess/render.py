"""Terminal rendering of ``assess``: the answer about the drafter and its reasons, the drafter against the
target's own MTP head, then the serving part, the timings' checks, the candidates (each column naming its
target) and where DIR is."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from draftlab.assess.run import AssessResult


def render_assess(result: AssessResult, console: Console) -> None:
    v = result.verdict
    assert v is not None  # a partial result is never rendered: the command ends on Ctrl-C
    console.print(f"[bold]{v.headline}[/bold]  ({v.kind})")
    for r in v.reasons:
        console.print(f"  • [bold]{r.rule}[/bold]: {r.text}")
    if v.versus is not None:
        console.print(f"[bold]Drafter or MTP head[/bold]: {v.versus.text}")
    if result.mtp_note:
        console.print(f"[bold]MTP head[/bold]: {result.mtp_note}")
    if v.serving is not None:
        console.print(f"[bold]Serving[/bold]: {v.serving.text}")
        if v.serving.model_free_note:
            console.print(f"  why: {v.serving.model_free_note}")
    if v.serve:
        console.print("  serve: " + ", ".join(f"batch {b} → {run}" for b, run in v.serve.items()))
    _schedule(result, console)
    _timings(result, console)
    if result.probes:
        old = {_label(r.config): r.mean_accept_length for r in result.old_probes or []}
        here, was = (Path(str(result.config.get(k))).name for k in ("target", "old_target"))
        table = Table(title="accept length per candidate (bonus included)")
        for column in ("candidate", f"on {here}", *([f"on {was} (OLD)"] if old else [])):
            table.add_column(column, justify="right")
        for r in result.probes:
            label = _label(r.config)
            table.add_row(label, f"{r.mean_accept_length:.3f}", *([f"{old[label]:.3f}"] if old else []))
        for r in result.mtp_probes or []:
            table.add_row(f"mtp {_label(r.config)}", f"{r.mean_accept_length:.3f}", *(["—"] if old else []))
        for m in result.model_free:
            table.add_row(f"{m.method} k={m.options['num_speculative_tokens']}", f"{m.mean_accept_length:.3f}",
                          *(["—"] if old else []))
        console.print(table)
    if result.coverage is not None:
        console.print(f"draft vocabulary coverage of the target's continuations: {result.coverage.coverage:.1%}")
    console.print(f"results in {result.files.get('assess.json', '')}, page {result.files.get('report.html', '')}")


def _schedule(result: AssessResult, console: Console) -> None:
    if result.schedule_plan is not None:
        ranges = ", ".join(f"batch {lo}-{hi} → K={k}" for lo, hi, k in result.schedule_plan["ranges"])
        console.print(f"schedule for {result.schedule_plan['engine']} {result.schedule_plan['version']}: {ranges} "
                      f"({result.files.get('schedule.json', '')})")
    elif result.schedule_note:
        console.print(f"no schedule: {result.schedule_note}")


def _timings(result: AssessResult, console: Console) -> None:
    """The timings' spread, their contradictions and the plan held against a real decode (plan's check line)."""
    from draftlab.cost.crosscheck import check_sentence

    if result.timing is None:
        return
    spread = ", ".join(f"{name.replace('_', ' ')} {ratio:.2f}x" for name, ratio in result.timing.spread.items())
    console.print(f"timings: widest spread (p90 / p10) per pass: {spread}")
    for c in result.timing.contradictions:
        console.print(f"  [yellow]contradiction[/yellow]: {c}")
    for check in result.measured_checks:
        console.print(f"  {check_sentence(check)}")


def _label(config: dict) -> str:
    return f"{config['steps']}/{config['topk']}/{config['num_draft_tokens']}"
