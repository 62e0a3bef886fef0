"""Two draft vocabularies side by side: overlap, Jaccard index and differing d2t entries.

``differing_d2t_entries`` is the figure users quote ("31,748 of 32,000 d2t values differ"):
positions ``i`` where ``d2t_a[i] != d2t_b[i]``; when the sizes differ, every position present
in only one of them counts as differing too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from draftlab.errors import DraftlabError
from draftlab.vocab.counts import TokenCounts
from draftlab.vocab.mapping import VocabMapping


@dataclass(frozen=True)
class CompareResult:
    a_size: int
    b_size: int
    shared_tokens: int
    jaccard: float
    differing_d2t_entries: int
    only_in_a: list[int]  # target ids, ascending
    only_in_b: list[int]
    coverage_a: float | None = None  # with counts: share of counted tokens each can propose
    coverage_b: float | None = None


def compare_mappings(a: VocabMapping, b: VocabMapping, counts: TokenCounts | None = None,
                     *, counts_source: str = "counts") -> CompareResult:
    """Compare ``a`` and ``b`` (same target vocabulary); with ``counts`` also their coverage."""
    if a.vocab_size != b.vocab_size:
        raise DraftlabError(f"A maps into a {a.vocab_size}-token target vocabulary but B into "
                            f"{b.vocab_size}; they belong to different targets")
    in_a, in_b = a.t2d, b.t2d
    shared = int((in_a & in_b).sum())
    union = int((in_a | in_b).sum())
    common = min(a.draft_size, b.draft_size)
    differing = int((a.d2t[:common] != b.d2t[:common]).sum()) + abs(a.draft_size - b.draft_size)
    cov_a = cov_b = None
    if counts is not None:
        counts.check_vocab(a.vocab_size, "the mappings' target", source=counts_source)
        dense = counts.dense()
        total = int(dense.sum())
        if total == 0:
            raise DraftlabError("counts hold no tokens; count some data first", path=counts_source)
        cov_a, cov_b = int(dense[in_a].sum()) / total, int(dense[in_b].sum()) / total
    return CompareResult(
        a_size=a.draft_size, b_size=b.draft_size, shared_tokens=shared,
        jaccard=shared / union if union else 1.0, differing_d2t_entries=differing,
        only_in_a=np.flatnonzero(in_a & ~in_b).tolist(), only_in_b=np.flatnonzero(in_b & ~in_a).tolist(),
        coverage_a=cov_a, coverage_b=cov_b)
