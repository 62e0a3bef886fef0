"""Terminal rendering of ``generate`` results (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from draftlab.decode.metrics import accept_stats

if TYPE_CHECKING:
    from draftlab.decode.generate import GenerateResult

SHOWN_LENGTHS = 24


def render_generate(result: GenerateResult, console: Console) -> None:
    """One row per prompt with its accept lengths, then the overall accept-length histogram."""
    cfg = result.config
    shape = "baseline (no drafter)" if cfg["no_draft"] else (
        f"steps {cfg['steps']}, topk {cfg['topk']}, draft tokens {cfg['num_draft_tokens']} ({cfg['flags_source']})")
    table = Table(title=f"generate: {shape}, temperature {cfg['temperature']}")
    for column in ("prompt", "tokens", "cycles", "mean accept"):
        table.add_column(column, justify="right")
    table.add_column("accept lengths")
    for r in result.results:
        stats = accept_stats(r.accept_lengths)
        shown = " ".join(map(str, r.accept_lengths[:SHOWN_LENGTHS])) + (" ..." if r.num_cycles > SHOWN_LENGTHS else "")
        table.add_row(str(r.prompt_index), str(len(r.output_ids)), str(r.num_cycles),
                      f"{stats.mean_accept_length:.2f}", shown)
    console.print(table)
    overall = accept_stats(n for r in result.results for n in r.accept_lengths)
    histogram = ", ".join(f"{length}: {count}" for length, count in overall.histogram.items())
    console.print(f"mean accept length [bold]{result.mean_accept_length:.3f}[/bold] over {overall.num_cycles} "
                  f"cycles (histogram {histogram or 'empty'}); {result.tokens_per_second:.1f} tokens/s")
    if result.config["batch_size"] > 1:
        console.print(f"rows busy {result.row_busy_fraction:.0%} of their groups' cycles: a group of "
                      f"{result.config['batch_size']} runs until its slowest row is done (a server would refill "
                      f"finished rows; draftlab plan assumes that)")
