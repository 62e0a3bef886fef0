"""A PNG of a plan: predicted tokens per second per config, one panel per batch size."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from draftlab.cost.plan import Plan  # noqa: E402
from draftlab.fsutil import atomic_path  # noqa: E402


def plot_plan(plan: Plan, dest: str | Path) -> Path:
    """Bars of predicted tok/s per config against the plain-decoding line; best bar highlighted."""
    batch_sizes = sorted(plan.baseline_tokens_per_second)
    fig, axes = plt.subplots(
        1, len(batch_sizes), figsize=(max(4.0, 3.2 * len(batch_sizes)), 3.8), squeeze=False
    )
    for ax, b in zip(axes[0], batch_sizes):
        rows = [r for r in plan.configs if r.batch_size == b]
        best = plan.best[b]
        colors = ["tab:green" if r is best and r.speedup > 1 else "tab:blue" for r in rows]
        ax.bar([r.label for r in rows], [r.tokens_per_second for r in rows], color=colors)
        base = plan.baseline_tokens_per_second[b]
        ax.axhline(base, color="tab:red", linestyle="--", label=f"no speculation ({base:.0f})")
        ax.set_title(f"batch {b}")
        ax.set_xlabel("steps/topk/num_draft_tokens")
        ax.tick_params(axis="x", labelrotation=45)
        ax.legend(fontsize="small")
    axes[0][0].set_ylabel("predicted tokens/s")
    fig.suptitle("Predicted throughput per speculation config")
    fig.tight_layout()
    dest = Path(dest)
    with atomic_path(dest) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return dest
