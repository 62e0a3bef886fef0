"""Terminal rendering of ``drift`` results (rich): per-layer hidden-state drift and its cost."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from draftlab.probe.drift import DriftResult


def render_drift(result: DriftResult, console: Console) -> None:
    """Cosine, relative L2 and CKA per layer, then next-token agreement, KL and the drafter's accept lengths."""
    a, b = Path(result.config["target_a"]).name, Path(result.config["target_b"]).name
    console.print(f"drift of {b} against {a}, over {result.num_positions} positions")
    table = Table()
    for column in ("layer", "cosine", "relative L2", "CKA"):
        table.add_column(column, justify="right")
    for layer in result.layers:
        table.add_row(str(layer.layer), f"{layer.cosine:.4f}", f"{layer.relative_l2:.4f}", f"{layer.cka:.4f}")
    console.print(table)
    console.print(f"next-token agreement [bold]{result.next_token_agreement:.1%}[/bold], "
                  f"mean KL(A || B) {result.kl:.4f} nats")
    if result.accept_length_a is not None:
        console.print(f"drafter accept length: [bold]{result.accept_length_a:.3f}[/bold] on A, "
                      f"[bold]{result.accept_length_b:.3f}[/bold] on B")
