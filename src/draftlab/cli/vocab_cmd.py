"""``draftlab vocab count|coverage|compare|build|remap``: thin wrappers over :mod:`draftlab.vocab`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from draftlab.cli.app import app
from draftlab.cli.output import show
from draftlab.console import err_console
from draftlab.documents import to_jsonable
from draftlab.fsutil import refuse_overlap
from draftlab.report.vocab import (
    render_vocab_build,
    render_vocab_compare,
    render_vocab_count,
    render_vocab_coverage,
    render_vocab_remap,
)

vocab_app = typer.Typer(name="vocab", no_args_is_help=True,
                        help="Draft vocabularies (d2t/t2d): count tokens, coverage, compare, build, remap.")
app.add_typer(vocab_app, name="vocab")

JsonFlag = typer.Option(False, "--json", help="Print one JSON document on stdout instead of a table.")


@contextmanager
def _progress(description: str) -> Iterator[Callable[[int, int], None]]:
    """A byte-progress bar on stderr; yields the ``progress(done, total)`` callback."""
    with Progress(TextColumn(description), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@vocab_app.command("count")
def count_cmd(
    data: list[Path] = typer.Option(..., "--data", help="JSONL file(s): messages, conversations, text or input_ids rows."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="The target's folder (tokenizer files, "
                                             "config.json); input_ids rows need only its config.json."),
    output: Path = typer.Option(..., "-o", "--output", help="Counts JSON to write."),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size", min=1, help="Target vocabulary size "
                                             "(default: the target's config.json); enough for input_ids rows."),
    skip_bad_lines: bool = typer.Option(False, "--skip-bad-lines", help="Count and skip malformed lines."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Tokenizer processes (default: CPUs)."),
    json_out: bool = JsonFlag,
) -> None:
    """Count target-token frequencies (assistant tokens only when the tokenizer has a chat template)."""
    from draftlab.vocab import count_to_file

    with _progress("counting") as progress:
        result = count_to_file(data, tokenizer, output, vocab_size=vocab_size, skip_bad_lines=skip_bad_lines,
                               workers=workers, progress=progress)
    show(result, json_out, render_vocab_count)


@vocab_app.command("coverage")
def coverage_cmd(
    source: Path = typer.Argument(..., help="A drafter folder or a mapping file (.safetensors / .pt)."),
    counts: Path = typer.Option(..., "--counts", help="Counts JSON from `vocab count`."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="Decode the missing tokens with it."),
    top: int = typer.Option(20, "--top", min=0, help="How many missing tokens to list."),
    json_out: bool = JsonFlag,
) -> None:
    """Share of counted tokens the draft vocabulary can propose, and the most frequent ones it cannot."""
    from draftlab.vocab import coverage, load_mapping, read_counts

    mapping = load_mapping(source)
    token_counts = read_counts(counts)
    decode = _decoder(tokenizer, mapping.vocab_size) if tokenizer is not None else None
    result = coverage(mapping, token_counts, top=top, decode=decode, source=str(counts))
    show(result, json_out, render_vocab_coverage, source)


def _decoder(tokenizer_dir: Path, vocab_size: int) -> Callable[[int], str | None]:
    from draftlab.vocab.tokenizer import check_tokenizer_fits, load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    check_tokenizer_fits(tok, vocab_size, path=tokenizer_dir)
    size = len(tok)
    return lambda token: tok.decode([token]) if token < size else None


@vocab_app.command("compare")
def compare_cmd(
    a: Path = typer.Argument(..., help="Drafter folder or mapping file A."),
    b: Path = typer.Argument(..., help="Drafter folder or mapping file B."),
    counts: Optional[Path] = typer.Option(None, "--counts", help="Counts JSON: also report each one's coverage."),
    json_out: bool = JsonFlag,
) -> None:
    """Two draft vocabularies side by side: shared tokens, Jaccard index, differing d2t entries."""
    from draftlab.vocab import compare_mappings, load_mapping, read_counts

    token_counts = read_counts(counts) if counts is not None else None
    result = compare_mappings(load_mapping(a), load_mapping(b), token_counts, counts_source=str(counts))
    show(result, json_out, render_vocab_compare, a, b, as_json=_without_nones)


def _without_nones(result: object) -> dict[str, object]:
    """The comparison's fields that apply (coverage only with --counts)."""
    return {k: v for k, v in to_jsonable(result).items() if v is not None}


@vocab_app.command("build")
def build_cmd(
    counts: Path = typer.Option(..., "--counts", help="Counts JSON from `vocab count`."),
    size: int = typer.Option(..., "--size", min=1, help="Draft vocabulary size (e.g. 32000)."),
    output: Path = typer.Option(..., "-o", "--output", help="Mapping file to write."),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size", min=1,
                                             help="Target vocabulary size (default: the counts' vocab_size)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="safetensors or pt (SpecForge's torch.save dict); "
                                      "default from the output suffix."),
    json_out: bool = JsonFlag,
) -> None:
    """Build a mapping from counts by SpecForge's rule (top-N by count, padded, sorted, d2t offsets)."""
    from draftlab.vocab import build_mapping_file

    result = build_mapping_file(counts, size, output, vocab_size, fmt)
    show(result, json_out, render_vocab_build)


@vocab_app.command("remap")
def remap_cmd(
    drafter: Path = typer.Argument(..., help="The drafter checkpoint folder (either layout)."),
    mapping: Path = typer.Option(..., "--mapping", help="The new mapping (file or drafter folder)."),
    output: Path = typer.Option(..., "-o", "--output", help="New drafter folder to write."),
    init: Optional[str] = typer.Option(None, "--init", help="Rows of new tokens: target-lm-head, mean or zeros "
                                       "(default: target-lm-head with --target, else mean)."),
    target: Optional[Path] = typer.Option(None, "--target", help="Target checkpoint, for --init target-lm-head."),
    json_out: bool = JsonFlag,
) -> None:
    """Rewrite a drafter for a new draft vocabulary, keeping shared lm_head rows bit-exactly."""
    from draftlab.vocab import load_mapping, remap_drafter

    refuse_overlap(output, {"DRAFTER": drafter, "--mapping": mapping, "--target": target}, folder=True)
    result = remap_drafter(drafter, load_mapping(mapping), output, init=init, target=target)
    show(result, json_out, render_vocab_remap)
