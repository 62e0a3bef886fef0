"""Terminal rendering of ``plan`` results (rich): the predicted throughput per config, or the
estimate from engine numbers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from draftlab.cost.engine_numbers import EngineEstimate
from draftlab.cost.plan import Plan

if TYPE_CHECKING:
    from draftlab.cost.auto_plan import AutoPlan


def render_measurements(result: AutoPlan, console: Console) -> None:
    """One line on what planning from a pair measured: the probed configs and where the costs were timed."""
    first = result.probes[0].config
    env = result.profile.environment
    n = len(result.probes)
    console.print(f"{n} config{'s' if n > 1 else ''} probed on {first['num_prompts']} prompts "
                  f"({first['max_new_tokens']} new tokens each); costs timed on {env.get('device')} "
                  f"({result.profile.model.dtype}) after {result.profile.context_tokens} cached tokens")


def render_plan(result: Plan, console: Console, plot_path: Path | None = None) -> None:
    """The plan as a table (best config per batch starred), its verdict and the plot's path."""
    table = Table(title="Predicted throughput per speculation config")
    served = result.served_baseline_tokens_per_second
    columns = ("batch", "config", "accept len", "cycle ms", "tok/s", "speedup", "break-even")
    for col in (*columns, *(["served tok/s"] if served is not None else [])):
        table.add_column(col, justify="left" if col == "config" else "right")
    for b, base in result.baseline_tokens_per_second.items():
        table.add_row(str(b), "baseline", "1.00", f"{result.decode_ms[b]:.2f}",
                      f"{base:.1f}", "1.00x", "", *([f"{served[b]:.1f}"] if served is not None else []), style="dim")
        for r in (r for r in result.configs if r.batch_size == b):
            star = " *" if r is result.best[b] else ""
            style = "bold green" if star and r.speedup > 1 else ("bold red" if star else None)
            table.add_row("", r.label + star, f"{r.accept_length:.2f}", f"{r.cycle_ms:.2f}",
                          f"{r.tokens_per_second:.1f}", f"{r.speedup:.2f}x",
                          f"{r.break_even_accept_length:.2f}",
                          *([f"{r.served_tokens_per_second:.1f}"] if served is not None else []), style=style)
    console.print(table)
    console.print("* best config at that batch size")
    if served is not None:
        console.print(f"served tok/s: draftlab serve's output tok/s for requests of {result.served_request_tokens} new "
                      "tokens (plan --served)")
    console.print(result.verdict)
    if plot_path is not None:
        console.print(f"plot: {plot_path}")


def render_engine_estimate(est: EngineEstimate, console: Console) -> None:
    """The measured engine numbers and each what-if scenario as rows, then the verdict."""
    table = Table(title=f"Speculation from engine numbers (batch {est.batch_size})")
    table.add_column("scenario", overflow="fold", min_width=16)
    for col in ("accept len", "cycle ms", "decode ms", "tok/s", "speedup", "break-even"):
        table.add_column(col, justify="right", no_wrap=True)

    def cell(v: float | None, fmt: str) -> str:
        return "?" if v is None else format(v, fmt)

    table.add_row("measured", cell(est.accept_length, ".2f"), f"{est.cycle_ms:.1f}",
                  f"{est.decode_ms:.1f}", cell(est.tokens_per_second, ".1f"),
                  cell(est.speedup, ".2f") + ("x" if est.speedup is not None else ""),
                  f"{est.break_even_accept_length:.2f}")
    for s in est.what_ifs:
        table.add_row(", ".join(f"{k}={v:g}" for k, v in s.assumptions.items()),
                      f"{s.accept_length:.2f}", f"{s.cycle_ms:.1f}", f"{s.decode_ms:.1f}",
                      f"{s.tokens_per_second:.1f}", f"{s.speedup:.2f}x",
                      f"{s.break_even_accept_length:.2f}")
    console.print(table)
    console.print(est.verdict)
