"""Terminal rendering of ``bench`` results and ``bench compare`` tables (rich)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from draftlab.report.format import fmt

if TYPE_CHECKING:
    from draftlab.bench.compare import CompareResult
    from draftlab.bench.result import BenchResult


def render_bench(result: BenchResult, console: Console, output: Path | None = None) -> None:
    """One run: load, latency percentiles, throughput, accept length, errors and the file ``output`` it went to."""
    c = result.config
    load = f"rate {c['request_rate']}/s" if c["request_rate"] else f"concurrency {c['concurrency'] or 1}"
    console.print(f"[bold]{c['api']}[/bold] {c['base_url']}  {load}  "
                  f"{result.completed} ok, {result.failed} failed in {result.duration_s:.2f} s")
    table = Table(show_edge=False)
    for col in ("metric", "mean", "p50", "p90", "p99"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for name, stats in (("TTFT ms", result.ttft_ms), ("TPOT ms", result.tpot_ms),
                        ("ITL ms (per chunk)", result.itl_ms), ("E2E ms", result.e2e_ms)):
        table.add_row(name, *(fmt(stats[k]) for k in ("mean", "p50", "p90", "p99")))
    console.print(table)
    console.print(f"output {result.output_throughput:.1f} tok/s, {result.request_throughput:.2f} req/s")
    if result.accept_length is not None:
        pos = ", ".join(f"{x:.2f}" for x in result.acceptance_by_position or [])
        console.print(f"accept length {result.accept_length:.3f}" + (f"  per position: {pos}" if pos else ""))
    else:
        console.print(f"accept length: - ({c['spec_metrics']})")
    for err in result.errors:
        console.print(f"[red]{err['kind']}[/red] x{err['count']}: {err['example']}")
    if output is not None:
        console.print(f"wrote {output}")


def render_bench_compare(result: CompareResult, console: Console) -> None:
    """One row per run: load, throughput, speedup over the baseline at equal load, latencies, accept length."""
    table = Table(title=f"baseline: {result.baseline}", show_edge=False)
    cols = ("arm", "load", "ok/failed", "out tok/s", "speedup", "TTFT p50", "TPOT mean", "ITL p50", "E2E p50", "accept len")
    for col in cols:
        table.add_column(col, justify="left" if col == "arm" else "right")
    for r in result.rows:
        load = f"{r.request_rate}/s" if r.request_rate else f"c={r.concurrency}"
        table.add_row(r.label, load, f"{r.completed}/{r.failed}", fmt(r.output_throughput),
                      "-" if r.speedup is None else f"{r.speedup:.2f}x", fmt(r.ttft_p50_ms), fmt(r.tpot_mean_ms),
                      fmt(r.itl_p50_ms), fmt(r.e2e_p50_ms), fmt(r.accept_length, ".3f"))
    console.print(table)
    if result.plot is not None:
        console.print(f"wrote {result.plot}")
