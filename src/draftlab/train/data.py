"""Training rows and batches: token ids with the loss mask ``vocab count`` finds, and target features.

Rows come from the JSONL kinds ``vocab count`` reads (:mod:`draftlab.vocab.rows`): conversations are
rendered with the target tokenizer's chat template and masked to assistant tokens exactly as
``vocab count`` masks them (:mod:`draftlab.vocab.assistant_spans`), text rows train on every token,
pre-tokenized rows on their ``loss_mask``. Or rows come from feature files in the layouts ``probe
--features`` reads (:mod:`draftlab.probe.features`), which also carry the features.

Each row is cut to ``seq_len`` tokens and its last position leaves the loss (it has no next token to
learn; SpecForge's offline normaliser does the same). The order over rows is a permutation per epoch
drawn from the seed, so a resumed run sees exactly the rows it would have seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from draftlab.errors import DraftlabError
from draftlab.probe.features import feature_files, read_sample
from draftlab.readable import regular_file
from draftlab.vocab.assistant_spans import (
    assistant_char_spans,
    generation_mask,
    has_generation_blocks,
    span_mask,
    template_text,
)
from draftlab.vocab.rows import BadRow, parse_row


@dataclass
class TrainRow:
    input_ids: list[int]
    loss_mask: list[int]
    aux: torch.Tensor | None = None  # [n, k*T] captured features (--features)
    final_hidden: torch.Tensor | None = None  # [n, T] the final (post-norm) state (--features)


def target_tokenizer(target: str | Path) -> tuple[Any | None, str]:
    """The target folder's tokenizer, or None and why it did not load: ``input_ids`` rows need none
    (as in ``vocab count``), so a target without a tokenizer still trains on them."""
    from draftlab.vocab.tokenizer import load_tokenizer

    try:
        return load_tokenizer(target), ""
    except DraftlabError as exc:
        return None, str(exc)


def tokenized_rows(data: str | Path, tokenizer: Any | None, vocab_size: int, seq_len: int, *,
                   drop_last: bool = True, no_tokenizer: str = "no tokenizer was given") -> list[TrainRow]:
    """Every row of a JSONL file, tokenized and masked; a bad line raises naming file and line.
    ``drop_last=False`` keeps each row's last position in the mask (captured features keep the data's mask).
    Without a ``tokenizer`` only ``input_ids`` rows are read; another row raises with ``no_tokenizer``."""
    path = Path(data)
    regular_file(path, "data file not found")
    template = template_text(tokenizer) if tokenizer is not None else None
    generation = template is not None and has_generation_blocks(template)
    rows = []
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                row = parse_row(raw.decode("utf-8").lstrip("\ufeff"))
                if tokenizer is None and row.kind != "input_ids":
                    raise BadRow(f"a {row.kind!r} row needs the target's tokenizer, but {no_tokenizer}; "
                                 "give input_ids rows or a target folder with its tokenizer")
                ids, mask = _tokenize(row, tokenizer, template, generation)
            except (BadRow, UnicodeDecodeError) as exc:
                raise DraftlabError(f"line {number}: {exc}", path=path) from None
            if ids and (min(ids) < 0 or max(ids) >= vocab_size):
                raise DraftlabError(f"line {number}: token id outside the target vocabulary [0, {vocab_size})",
                                    path=path)
            row = _finish(ids, mask, seq_len, drop_last=drop_last)
            if row is not None:
                rows.append(row)
    if not rows:
        raise DraftlabError("has no row with a trainable token (assistant tokens, text or loss_mask 1s)", path=path)
    return rows


def _tokenize(row, tokenizer, template: str | None, generation: bool) -> tuple[list[int], list[int]]:
    if row.kind == "input_ids":
        return row.input_ids, row.loss_mask or [1] * len(row.input_ids)
    if row.kind == "text":
        ids = tokenizer.backend_tokenizer.encode(row.text, add_special_tokens=False).ids
        return ids, [1] * len(ids)
    if template is None:
        raise BadRow("a conversation needs the target tokenizer's chat template to find assistant tokens; "
                     "this tokenizer has none (give text or input_ids rows)")
    if generation:
        return generation_mask(tokenizer, row.messages)
    text, spans = assistant_char_spans(tokenizer, row.messages)
    enc = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    return list(enc.ids), span_mask(enc.offsets, spans).astype(np.int64).tolist()


def _finish(ids: list[int], mask: list[int], seq_len: int, aux: torch.Tensor | None = None,
            final: torch.Tensor | None = None, drop_last: bool = True) -> TrainRow | None:
    ids, mask = list(ids[:seq_len]), list(mask[:seq_len])
    if len(ids) < 2:
        return None
    if drop_last:
        mask[-1] = 0
    if not any(mask[:-1]):
        return None
    return TrainRow(ids, mask, None if aux is None else aux[:seq_len], None if final is None else final[:seq_len])


def feature_rows(folder: str | Path, *, hidden_size: int, num_aux: int, seq_len: int) -> list[TrainRow]:
    """Rows from captured feature files; training needs each file's final state (the target's distribution)."""
    rows = []
    for path in feature_files(folder):
        sample = read_sample(path, hidden_size=hidden_size, num_aux=num_aux)
        if sample.final_hidden is None:
            raise DraftlabError("has no final hidden state, so the target's distribution is unknown; capture "
                                "it too (SpecForge's hidden_state, or speculators' extra last layer)", path=path)
        mask = sample.loss_mask if sample.loss_mask is not None else [0] + [1] * (len(sample.input_ids) - 1)
        row = _finish(sample.input_ids, mask, seq_len, sample.aux, sample.final_hidden)
        if row is not None:
            rows.append(row)
    if not rows:
        raise DraftlabError("has no feature file with a trainable token", path=folder)
    return rows


@dataclass
class DataOrder:
    """Where the run is in its data: epoch and rows consumed in it (checkpointed, so resume is exact)."""

    seed: int
    epoch: int = 0
    cursor: int = 0

    def next_rows(self, num_rows: int, batch: int) -> list[int]:
        """The next ``batch`` row indices; an epoch's leftover rows start the next epoch's batch."""
        out: list[int] = []
        while len(out) < batch:
            order = torch.randperm(num_rows, generator=torch.Generator().manual_seed(self.seed * 100003 + self.epoch))
            take = order[self.cursor:self.cursor + batch - len(out)].tolist()
            out += take
            self.cursor += len(take)
            if self.cursor >= num_rows:
                self.epoch, self.cursor = self.epoch + 1, 0
        return out

    def state(self) -> dict[str, int]:
        return {"seed": self.seed, "epoch": self.epoch, "cursor": self.cursor}


def pad_batch(rows: list[TrainRow], width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, loss_mask (long) and attention mask (bool) [B, width], right-padded with zeros."""
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    attn = torch.zeros(len(rows), width, dtype=torch.bool)
    for r, row in enumerate(rows):
        n = len(row.input_ids)
        ids[r, :n] = torch.tensor(row.input_ids)
        mask[r, :n] = torch.tensor(row.loss_mask)
        attn[r, :n] = True
    return ids, mask, attn


def pad_features(rows: list[TrainRow], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Captured aux [B, width, k*T] and final hidden [B, width, T], zero-padded."""
    aux = torch.zeros(len(rows), width, rows[0].aux.shape[-1], dtype=rows[0].aux.dtype)
    final = torch.zeros(len(rows), width, rows[0].final_hidden.shape[-1], dtype=rows[0].final_hidden.dtype)
    for r, row in enumerate(rows):
        n = len(row.input_ids)
        aux[r, :n], final[r, :n] = row.aux, row.final_hidden
    return aux, final
