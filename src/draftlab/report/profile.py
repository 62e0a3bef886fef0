"""Terminal rendering of ``profile`` results (rich): the measured pass costs and the decoders' own work."""

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
    if result.overhead or result.mtp_overhead:
        console.print(_overheads(result))
    engine = result.mtp or result.deployment
    if engine:
        head = (result.mtp or {}).get("mtp_layer")
        console.print(f"for {engine.get('engine')} {engine.get('engine_version')}"
                      + (f": the MTP head {head}" if head else "")
                      + (f", captured layers {engine['captured_layers']}" if engine.get("captured_layers") else ""))
    env = result.environment
    console.print(f"torch {env.get('torch')}, {env.get('gpus') or env.get('cpu')}; written to {out}")


def _overheads(result: Profile) -> Table:
    """The reference decoder's measured work beyond its passes, per batch size: with the drafter, and with the
    MTP head drafting (what the planner adds to each cycle)."""
    table = Table(title="Decoder's own work beyond the passes (ms)")
    for col in ("drafting", "batch", "plain step", "cycle", "per draft step", "tree"):
        table.add_column(col, justify="left" if col == "drafting" else "right")
    for name, fits in (("drafter", result.overhead), ("MTP head", result.mtp_overhead)):
        for o in fits:
            table.add_row(name, str(o.batch_size), f"{o.decode_ms:.3f}", f"{o.cycle_ms:.3f}", f"{o.draft_step_ms:.3f}",
                          f"{o.tree_ms:.3f}")
    return table
