"""Terminal rendering of ``vocab count|coverage|compare|build|remap`` results (rich key-value tables)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from draftlab.vocab import BuildResult, CompareResult, CountResult, CoverageResult, RemapResult


def _table(title: str, rows: list[tuple[str, Any]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, f"{value:.2%}" if isinstance(value, float) else str(value))
    return table


def render_vocab_count(result: CountResult, console: Console) -> None:
    console.print(_table("vocab count", [
        ("output", result.output), ("mode", result.mode), ("vocab size", result.vocab_size),
        ("tokens counted", f"{result.num_tokens:,}"), ("distinct tokens", f"{result.distinct_tokens:,}"),
        ("rows", ", ".join(f"{k} {v}" for k, v in result.rows.items() if v)),
        ("skipped lines", result.skipped_lines),
        ("throughput", f"{result.tokens_per_second:,.0f} tokens/s ({result.seconds:.1f} s, tokenizer loading included)"),
    ]))


def render_vocab_coverage(result: CoverageResult, console: Console, source: Path) -> None:
    """Coverage of the draft vocabulary read from ``source``, then its most frequent missing tokens."""
    console.print(_table(f"coverage of {source}", [
        ("coverage", result.coverage), ("tokens counted", f"{result.num_tokens:,}"),
        ("draft / target vocab", f"{result.draft_size:,} / {result.vocab_size:,}"),
        ("distinct tokens missing", f"{result.distinct_missing:,}"),
    ]))
    if result.missing:
        table = Table(title="most frequent missing tokens", title_justify="left")
        for column in ("token id", "count", "share", "text"):
            table.add_column(column, justify="right" if column != "text" else "left")
        for m in result.missing:
            table.add_row(str(m.token_id), f"{m.count:,}", f"{m.count / result.num_tokens:.3%}",
                          repr(m.text) if m.text is not None else "")
        console.print(table)


def render_vocab_compare(result: CompareResult, console: Console, a: Path, b: Path) -> None:
    """Draft vocabularies ``a`` and ``b`` side by side (with each one's coverage when counts were given)."""
    rows: list[tuple[str, Any]] = [
        ("draft size A / B", f"{result.a_size:,} / {result.b_size:,}"),
        ("shared tokens", f"{result.shared_tokens:,}"), ("jaccard", f"{result.jaccard:.4f}"),
        ("differing d2t entries", f"{result.differing_d2t_entries:,}"),
        ("only in A", f"{len(result.only_in_a):,}"), ("only in B", f"{len(result.only_in_b):,}"),
    ]
    if result.coverage_a is not None:
        rows += [("coverage A", result.coverage_a), ("coverage B", result.coverage_b)]
    console.print(_table(f"{a} vs {b}", rows))


def render_vocab_build(result: BuildResult, console: Console) -> None:
    console.print(_table("vocab build", [
        ("output", f"{result.output} ({result.format})"),
        ("draft / target vocab", f"{result.draft_size:,} / {result.vocab_size:,}"),
        ("distinct tokens seen", f"{result.seen_tokens:,}"), ("padded with unseen ids", result.padded),
        ("coverage of the counts", result.coverage),
    ]))


def render_vocab_remap(result: RemapResult, console: Console) -> None:
    console.print(_table("vocab remap", [
        ("output", result.output), ("layout", result.layout),
        ("draft size old -> new", f"{result.old_size:,} -> {result.new_size:,}"),
        ("rows kept (bit-exact)", f"{result.kept:,}"), (f"rows new ({result.init})", f"{result.new:,}"),
        ("rows dropped", f"{result.dropped:,}"),
    ]))
