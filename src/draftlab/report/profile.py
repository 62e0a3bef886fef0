"""Terminal rendering of ``profile`` results (rich): the measured pass costs."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from draftlab.cost.profile import Profile


def render_profile(result: Profile, console: Console, out: Path) -> None:
    """Median and spread of every timed pass, then the environment and the file ``out`` it went to."""
    table = Table(title=f"Measured costs ({result.timer or 'all-reduce only'}, ms)")
    for col in ("pass", "batch", "tokens", "median", "p10", "p90"):
        table.add_column(col, justify="left" if col == "pass" else "right")
    sections = [("verify", result.verify), ("draft step", result.draft_step),
                ("draft-extend", result.draft_extend), ("MTP draft step", result.mtp_draft_step),
                ("MTP draft-extend", result.mtp_draft_extend)]
    if result.allreduce is not None:
        sections.append((f"all-reduce x{result.allreduce.calls_per_forward}", result.allreduce.points))
    for name, points in sections:
        for m in points:
            table.add_row(name, str(m.batch_size), str(m.tokens), f"{m.median_ms:.3f}",
                          f"{m.p10_ms:.3f}", f"{m.p90_ms:.3f}")
    console.print(table)
    engine = result.mtp or result.deployment
    if engine:
        head = (result.mtp or {}).get("mtp_layer")
        console.print(f"for {engine.get('engine')} {engine.get('engine_version')}"
                      + (f": the MTP head {head}" if head else "")
                      + (f", captured layers {engine['captured_layers']}" if engine.get("captured_layers") else ""))
    env = result.environment
    console.print(f"torch {env.get('torch')}, {env.get('gpus') or env.get('cpu')}; written to {out}")
