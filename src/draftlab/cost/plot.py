"""A PNG of a plan: predicted tokens per second per config, one panel per batch size."""

from __future__ import annotations

from pathlib import Path

from draftlab import figures
from draftlab.cost.plan import Plan


def plot_plan(plan: Plan, dest: str | Path) -> Path:
    """Bars of predicted tok/s per config against the plain-decoding line; best bar highlighted."""
    batch_sizes = sorted(plan.baseline_tokens_per_second)
    fig, axes = figures.plt.subplots(
        1, len(batch_sizes), figsize=(max(4.0, 3.2 * len(batch_sizes)), 3.8), squeeze=False
    )
    for ax, b in zip(axes[0], batch_sizes):
        rows = [r for r in plan.configs if r.batch_size == b]
        best = plan.best[b]
        colors = ["tab:green" if r is best and r.speedup > 1 else "tab:blue" for r in rows]
        ax.bar([r.label for r in rows], [r.tokens_per_second for r in rows], color=colors)
        base = plan.baseline_tokens_per_second[b]
        ax.axhline(base, color="tab:red", linestyle="--")
        ax.set_title(f"batch {b}: no speculation (dashed) {base:.0f} tok/s", fontsize="medium")
        ax.set_xlabel("steps/topk/num_draft_tokens")
        ax.tick_params(axis="x", labelrotation=45)
    axes[0][0].set_ylabel("predicted tokens/s")
    fig.suptitle("Predicted throughput per speculation config")
    dest = Path(dest)
    figures.save_png(fig, dest, dpi=110)
    return dest
