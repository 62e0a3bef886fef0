"""The sweep's PNG: output throughput (with speedup over the baseline) and accept length per config,
bars grouped by batch, one colour per config across batches."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from draftlab.bench.sweep import SweepRow


def plot_sweep(rows: list[SweepRow], dest: Path) -> None:
    """Write the two-panel bar chart; a failed entry shows as "failed" where its bar would be."""
    from draftlab import figures

    batches = sorted({r.batch for r in rows})
    configs = list(dict.fromkeys(r.config for r in rows))
    width = 0.8 / len(configs)
    fig, (ax_t, ax_a) = figures.plt.subplots(2, 1, figsize=(max(6.0, 0.7 * len(rows) + 2), 7), sharex=True)
    in_legend: set[str] = set()
    for j, config in enumerate(configs):
        colour = f"C{j % 10}"
        for i, batch in enumerate(batches):
            row = next((r for r in rows if r.batch == batch and r.config == config), None)
            if row is None:
                continue
            x = i + (j - (len(configs) - 1) / 2) * width
            if row.error is not None:
                ax_t.text(x, 0, "failed", rotation=90, ha="center", va="bottom", fontsize=8, color="red")
                continue
            label = None if config in in_legend else config
            in_legend.add(config)
            bar = ax_t.bar(x, row.output_throughput or 0.0, width, color=colour, label=label)
            if row.speedup is not None:
                ax_t.bar_label(bar, labels=[f"{row.speedup:.2f}x"], fontsize=8)
            if row.accept_length is not None:
                bar = ax_a.bar(x, row.accept_length, width, color=colour)
                ax_a.bar_label(bar, labels=[f"{row.accept_length:.2f}"], fontsize=8)
    ax_t.set(ylabel="output tokens/s", title="Throughput (speedup over the baseline at the same batch)")
    ax_a.set(ylabel="accept length", title="Accept length (tokens per verify cycle)", xlabel="batch (concurrency)")
    ax_a.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax_a.set_xticks(range(len(batches)), [str(b) for b in batches])
    for ax in (ax_t, ax_a):
        ax.grid(axis="y", alpha=0.3)
        ax.margins(y=0.15)
    figures.legend(ax_t, title="steps/topk/draft tokens", fontsize=8)
    figures.save_png(fig, dest, dpi=120)
