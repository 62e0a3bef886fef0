"""How much of the counted text a draft vocabulary can propose at all.

A target token outside the draft vocabulary can never be drafted, so ``coverage`` (the share of
counted tokens inside it) bounds the per-step acceptance rate from above.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from draftlab.errors import DraftlabError
from draftlab.vocab.counts import TokenCounts
from draftlab.vocab.mapping import VocabMapping


@dataclass(frozen=True)
class MissingToken:
    token_id: int
    count: int
    text: str | None  # decoded with the tokenizer when one is given


@dataclass(frozen=True)
class CoverageResult:
    coverage: float  # counted tokens inside the draft vocabulary / all counted tokens
    num_tokens: int
    covered_tokens: int
    draft_size: int
    vocab_size: int
    distinct_missing: int  # distinct counted ids outside the draft vocabulary
    missing: list[MissingToken]  # the most frequent of them, most frequent first


def coverage(mapping: VocabMapping, counts: TokenCounts, *, top: int = 20,
             decode: Callable[[int], str] | None = None, source: str = "counts") -> CoverageResult:
    """Coverage of ``counts`` by ``mapping`` and its ``top`` most frequent missing tokens."""
    counts.check_vocab(mapping.vocab_size, "the draft vocabulary's target", source=source)
    dense = counts.dense()
    total = int(dense.sum())
    if total == 0:
        raise DraftlabError("counts hold no tokens; count some data first", path=source)
    inside = mapping.t2d
    covered = int(dense[inside].sum())
    outside = np.where(inside, 0, dense)
    missing_ids = np.flatnonzero(outside)
    ranked = missing_ids[np.argsort(-outside[missing_ids], kind="stable")][:max(top, 0)]
    missing = [MissingToken(int(t), int(dense[t]), decode(int(t)) if decode else None) for t in ranked]
    return CoverageResult(covered / total, total, covered, mapping.draft_size, mapping.vocab_size,
                          int(missing_ids.size), missing)
