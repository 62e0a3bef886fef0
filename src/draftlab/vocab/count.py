"""Count target-token frequencies in JSONL data, fast: batched fast-tokenizer calls in several processes.

Files are read in blocks of whole lines; each block is parsed, tokenized in one batched call to
the Rust tokenizer and reduced to a histogram in a worker process, so only histograms travel back.
With a chat template, conversations count only assistant tokens (see
:mod:`draftlab.vocab.assistant_spans`); ``{"text"}`` rows always count every token and
``{"input_ids"}`` rows count the positions of their ``loss_mask`` (every position without one).
Tokens are counted without the tokenizer's automatic special tokens; a template writes its own.
``{"input_ids"}`` rows need no tokenizer: with ``--vocab-size V``, or a target folder whose
tokenizer does not load but whose config.json gives ``vocab_size``, only other rows are refused.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from draftlab.checkpoint import read_json, text_config
from draftlab.errors import DraftlabError
from draftlab.fsutil import refuse_overlap
from draftlab.readable import regular_file
from draftlab.vocab.assistant_spans import (
    assistant_char_spans,
    generation_mask,
    has_generation_blocks,
    span_mask,
    template_text,
)
from draftlab.vocab.counts import TokenCounts
from draftlab.vocab.rows import ROW_KINDS, BadRow, parse_row
from draftlab.vocab.tokenizer import check_tokenizer_fits, load_tokenizer, target_vocab_size

BLOCK_BYTES = 1 << 20  # lines are handed to workers in blocks of about this many bytes
MAX_SKIP_EXAMPLES = 5


@dataclass
class _Block:
    file_index: int
    first_line: int  # 1-based number of the block's first line
    data: bytes


@dataclass
class _BlockResult:
    file_index: int
    ids: np.ndarray
    counts: np.ndarray
    rows: dict[str, int]
    bad: list[tuple[int, str]]  # (line number, why)
    nbytes: int
    needs_tokenizer: tuple[int, str] | None = None  # first (line, row kind) that cannot count without one


@dataclass
class _BlockCounter:
    """Per-process state: the tokenizer and how to count with it."""

    tokenizer: Any | None  # None: only input_ids rows can be counted
    vocab_size: int
    template: str | None

    def __post_init__(self) -> None:
        self.generation = self.template is not None and has_generation_blocks(self.template)

    def count_block(self, block: _Block) -> _BlockResult:
        rows = dict.fromkeys(ROW_KINDS, 0)
        bad: list[tuple[int, str]] = []
        texts: list[str] = []  # counted in full
        chats: list[tuple[str, list[tuple[int, int]]]] = []  # rendered text, assistant spans
        pieces: list[np.ndarray] = []
        needs_tokenizer: tuple[int, str] | None = None
        for number, raw in enumerate(block.data.split(b"\n"), block.first_line):
            if not raw.strip():
                continue
            try:
                row = parse_row(raw.decode("utf-8").lstrip("\ufeff"))
                if row.kind != "input_ids" and self.tokenizer is None:
                    needs_tokenizer = needs_tokenizer or (number, row.kind)
                    continue
                if row.kind == "input_ids":
                    pieces.append(self._pretokenized(row.input_ids, row.loss_mask))
                elif row.kind == "text":
                    texts.append(row.text)
                elif self.template is None:
                    texts.extend(m["content"] for m in row.messages)
                elif self.generation:
                    ids, mask = generation_mask(self.tokenizer, row.messages)
                    pieces.append(np.asarray(ids, dtype=np.int64)[np.asarray(mask, dtype=bool)])
                else:
                    chats.append(assistant_char_spans(self.tokenizer, row.messages))
                rows[row.kind] += 1
            except (BadRow, UnicodeDecodeError) as exc:
                why = "not valid UTF-8" if isinstance(exc, UnicodeDecodeError) else str(exc)
                bad.append((number, why))
        backend = self.tokenizer.backend_tokenizer if self.tokenizer is not None else None
        if texts:
            encodings = backend.encode_batch_fast(texts, add_special_tokens=False)
            pieces.append(np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int64))
        if chats:
            encodings = backend.encode_batch([text for text, _ in chats], add_special_tokens=False)
            for enc, (_, spans) in zip(encodings, chats):
                pieces.append(np.asarray(enc.ids, dtype=np.int64)[span_mask(enc.offsets, spans)])
        all_ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        histogram = np.bincount(all_ids, minlength=self.vocab_size)
        ids = np.flatnonzero(histogram)
        counts = histogram[ids]
        return _BlockResult(block.file_index, ids, counts, rows, bad, len(block.data), needs_tokenizer)

    def _pretokenized(self, ids: list[int], mask: list[int] | None) -> np.ndarray:
        try:
            arr = np.asarray(ids, dtype=np.int64)
        except OverflowError:
            raise BadRow("input_ids hold a number too large for a token id") from None
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            raise BadRow(f"input_ids hold {int(arr.max() if arr.max() >= self.vocab_size else arr.min())}, "
                         f"outside the target vocabulary [0, {self.vocab_size})")
        return arr if mask is None else arr[np.asarray(mask, dtype=bool)]


_STATE: _BlockCounter | None = None


def _init_worker(tokenizer_dir: str | None, vocab_size: int) -> None:
    global _STATE
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already
    tok = load_tokenizer(tokenizer_dir) if tokenizer_dir is not None else None
    _STATE = _BlockCounter(tok, vocab_size, template_text(tok) if tok is not None else None)


def _count_in_worker(block: _Block) -> _BlockResult:
    assert _STATE is not None
    return _STATE.count_block(block)


def _blocks(files: list[Path]) -> Iterator[_Block]:
    """Whole-line blocks of every file, with the number of each block's first line."""
    for index, path in enumerate(files):
        line = 1
        with path.open("rb") as f:
            rest = b""
            while chunk := f.read(BLOCK_BYTES):
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    rest = data
                    continue
                yield _Block(index, line, data[:cut])
                line += data.count(b"\n", 0, cut)
                rest = data[cut:]
            if rest:
                yield _Block(index, line, rest)


def count_tokens(data: list[str | Path], tokenizer_dir: str | Path | None = None, *, vocab_size: int | None = None,
                 skip_bad_lines: bool = False, workers: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> TokenCounts:
    """Token counts of ``data`` (JSONL files) with the target tokenizer in ``tokenizer_dir``.

    ``vocab_size`` defaults to the target's (config.json in ``tokenizer_dir``). Without a loadable
    tokenizer only ``input_ids`` rows are counted; any other row raises naming its line.

    ``workers`` processes tokenize in parallel (default: one per CPU; 1 runs in-process).
    ``progress(done_bytes, total_bytes)`` is called after each block. Malformed lines raise a
    :class:`DraftlabError` naming file and line, or are counted and skipped with ``skip_bad_lines``.
    The provenance records files, tokenizer, mode, rows of each kind and skipped lines.
    """
    files = [Path(p) for p in data]
    if not files:
        raise DraftlabError("no data files given; pass --data FILE")
    for path in files:
        regular_file(path, "no such data file")
    tokenizer_dir = Path(tokenizer_dir) if tokenizer_dir is not None else None
    tok, no_tokenizer = _tokenizer(tokenizer_dir, vocab_size)
    vocab_size = _vocab_size(tokenizer_dir, tok, vocab_size, no_tokenizer)
    counter = _BlockCounter(tok, vocab_size, template_text(tok) if tok is not None else None)
    total_bytes = sum(p.stat().st_size for p in files)
    workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
    if total_bytes <= BLOCK_BYTES:
        workers = 1

    dense = np.zeros(vocab_size, dtype=np.int64)
    rows = dict.fromkeys(ROW_KINDS, 0)
    per_file = [0] * len(files)
    skipped: list[str] = []
    skipped_count = 0
    done = 0
    with _block_results(files, tokenizer_dir if tok is not None else None, counter, workers) as results:
        for result in results:
            if result.needs_tokenizer is not None:
                line, kind = result.needs_tokenizer
                raise DraftlabError(f"line {line}: a {kind!r} row needs the target's tokenizer, but {no_tokenizer}; "
                                    "only input_ids rows count without one", path=files[result.file_index])
            if result.bad and not skip_bad_lines:
                line, why = result.bad[0]
                raise DraftlabError(f"line {line}: {why}; fix the line or pass --skip-bad-lines",
                                    path=files[result.file_index])
            for line, why in result.bad:
                skipped_count += 1
                if len(skipped) < MAX_SKIP_EXAMPLES:
                    skipped.append(f"{files[result.file_index]}:{line}: {why}")
            dense[result.ids] += result.counts
            for kind, n in result.rows.items():
                rows[kind] += n
            per_file[result.file_index] += sum(result.rows.values())
            done += result.nbytes
            if progress:
                progress(done, total_bytes)
    for path, n in zip(files, per_file):
        if n == 0:
            raise DraftlabError("has no usable rows (empty, or every line was skipped)", path=path)
    if not dense.any():
        raise DraftlabError("the data hold no tokens to count" +
                            (" (no assistant messages?)" if counter.template else ""), path=files[0])
    mode = "pretokenized" if tok is None else "assistant-tokens" if counter.template else "all-tokens"
    provenance: dict[str, Any] = {
        "files": [str(p) for p in files], "tokenizer": str(tokenizer_dir) if tok is not None else None,
        "mode": mode,
        "rows": rows, "skipped_lines": skipped_count,
    }
    if skipped:
        provenance["skipped_examples"] = skipped
    return TokenCounts.from_dense(dense, provenance)


def _tokenizer(tokenizer_dir: Path | None, vocab_size: int | None) -> tuple[Any | None, str]:
    """The target's tokenizer, or None and why not (it is then needed only by rows other than
    input_ids). A folder whose tokenizer fails to load is refused unless its config.json or
    ``vocab_size`` still gives the vocabulary size."""
    if tokenizer_dir is None:
        return None, "no --tokenizer TARGET_DIR was given"
    try:
        return load_tokenizer(tokenizer_dir), ""
    except DraftlabError as exc:
        if vocab_size is None and not (tokenizer_dir / "config.json").is_file():
            raise
        return None, str(exc)


def _vocab_size(tokenizer_dir: Path | None, tok: Any | None, vocab_size: int | None, no_tokenizer: str) -> int:
    """``vocab_size`` if given (checked against the tokenizer), else the target's."""
    if vocab_size is not None:
        if vocab_size <= 0:
            raise DraftlabError(f"--vocab-size must be a positive integer; got {vocab_size}")
        if tok is not None:
            check_tokenizer_fits(tok, vocab_size, path=tokenizer_dir or ".")
        return vocab_size
    if tokenizer_dir is None:
        raise DraftlabError("pass --tokenizer TARGET_DIR, or --vocab-size V to count input_ids rows without one")
    if tok is not None:
        return target_vocab_size(tokenizer_dir, tok)
    config_path = tokenizer_dir / "config.json"
    config = read_json(config_path)
    vocab = text_config(config).get("vocab_size") if isinstance(config, dict) else None
    if not isinstance(vocab, int) or vocab <= 0:
        raise DraftlabError(f"has no positive integer vocab_size (and {no_tokenizer}); pass --vocab-size V",
                            path=config_path)
    return vocab


@contextlib.contextmanager
def _block_results(files: list[Path], tokenizer_dir: Path | None, counter: _BlockCounter,
                   workers: int) -> Iterator[Iterator[_BlockResult]]:
    """Block results in file order, from this process or from a pool of ``workers`` processes."""
    if workers == 1:
        yield (counter.count_block(b) for b in _blocks(files))
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    pool = ctx.Pool(workers, _init_worker, (str(tokenizer_dir) if tokenizer_dir else None, counter.vocab_size))
    try:
        yield pool.imap(_count_in_worker, _blocks(files))
    finally:
        pool.terminate()
        pool.join()


@dataclass(frozen=True)
class CountResult:
    output: Path
    vocab_size: int
    num_tokens: int
    distinct_tokens: int
    mode: str
    rows: dict[str, int]
    skipped_lines: int
    seconds: float
    tokens_per_second: float


def count_to_file(data: list[str | Path], tokenizer_dir: str | Path | None, output: str | Path, *,
                  vocab_size: int | None = None, skip_bad_lines: bool = False, workers: int | None = None,
                  progress: Callable[[int, int], None] | None = None) -> CountResult:
    """Count ``data`` and write the counts file atomically."""
    refuse_overlap(output, {**{f"--data {d}": d for d in data}, "--tokenizer": tokenizer_dir})
    started = time.perf_counter()
    counts = count_tokens(data, tokenizer_dir, vocab_size=vocab_size, skip_bad_lines=skip_bad_lines,
                          workers=workers, progress=progress)
    seconds = time.perf_counter() - started
    counts.save(output)
    n = counts.num_tokens
    return CountResult(Path(output), counts.vocab_size, n, len(counts.counts), counts.provenance["mode"],
                       counts.provenance["rows"], counts.provenance["skipped_lines"], seconds,
                       n / seconds if seconds > 0 else 0.0)
