"""Runs side by side: one arm per label (baseline, each speculative config), speedups at equal load.

An arm is every result file with the same ``config.label`` (the file name when unlabelled), one
file per concurrency. Speedup = an arm's output throughput / the baseline arm's at the same
concurrency (and request rate).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from draftlab.bench.result import BenchResult, load_result
from draftlab.errors import DraftlabError


@dataclass(frozen=True)
class CompareRow:
    label: str
    file: str
    concurrency: int | None
    request_rate: float | None
    completed: int
    failed: int
    output_throughput: float
    speedup: float | None  # vs the baseline arm at the same load; None when it has no such run
    ttft_p50_ms: float | None
    tpot_mean_ms: float | None
    itl_p50_ms: float | None
    e2e_p50_ms: float | None
    accept_length: float | None


@dataclass(frozen=True)
class CompareResult:
    baseline: str
    rows: list[CompareRow]
    plot: Path | None


def _label(result: BenchResult, path: Path) -> str:
    return str(result.config.get("label") or path.stem)


def _load(result: BenchResult) -> tuple[int | None, float | None]:
    concurrency = result.config.get("concurrency")
    rate = result.config.get("request_rate")
    if concurrency is None and rate is None:
        concurrency = 1  # the client's default
    return concurrency, rate


def compare_results(paths: list[Path], *, baseline: str | None = None, plot: Path | None = None) -> CompareResult:
    """Tabulate ``paths`` (bench -o files) against the baseline arm; optionally plot them."""
    if not paths:
        raise DraftlabError("give at least one result file (draftlab bench -o FILE)")
    runs = [(p, load_result(p)) for p in paths]
    labels = [_label(r, p) for p, r in runs]
    base = baseline or labels[0]
    if base not in labels:
        raise DraftlabError(f"--baseline {base!r} is none of the runs' labels: {', '.join(dict.fromkeys(labels))}")
    base_tput = {_load(r): r.output_throughput for (p, r), lab in zip(runs, labels) if lab == base}
    rows = []
    for (path, r), label in zip(runs, labels):
        ref = base_tput.get(_load(r))
        concurrency, rate = _load(r)
        rows.append(CompareRow(
            label=label, file=str(path), concurrency=concurrency, request_rate=rate,
            completed=r.completed, failed=r.failed, output_throughput=r.output_throughput,
            speedup=r.output_throughput / ref if ref else None,
            ttft_p50_ms=r.ttft_ms.get("p50"), tpot_mean_ms=r.tpot_ms.get("mean"),
            itl_p50_ms=r.itl_ms.get("p50"), e2e_p50_ms=r.e2e_ms.get("p50"), accept_length=r.accept_length,
        ))
    rows.sort(key=lambda row: (row.label != base, row.label, row.concurrency or 0, row.request_rate or 0.0))
    if plot is not None:
        plot_rows(rows, plot)
    return CompareResult(base, rows, plot)


def plot_rows(rows: list[CompareRow], dest: Path) -> None:
    """Output throughput and TPOT against concurrency, one line per arm, as a PNG."""
    from draftlab import figures

    fig, (ax_t, ax_l) = figures.plt.subplots(1, 2, figsize=(10, 4))
    for label in dict.fromkeys(r.label for r in rows):
        arm = sorted((r for r in rows if r.label == label and r.concurrency is not None), key=lambda r: r.concurrency)
        xs = [r.concurrency for r in arm]
        ax_t.plot(xs, [r.output_throughput for r in arm], marker="o", label=label)
        ax_l.plot(xs, [r.tpot_mean_ms for r in arm], marker="o", label=label)
    ax_t.set(xlabel="concurrency", ylabel="output tokens/s", title="Throughput")
    ax_l.set(xlabel="concurrency", ylabel="TPOT mean (ms)", title="Latency per output token")
    for ax in (ax_t, ax_l):
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    figures.legend(ax_l)  # one legend for both panels, beside the right one
    figures.save_png(fig, dest, dpi=120)
