"""Accept length by context: the mean accept length of the cycles whose root lies in each bucket of
positions, so a user sees where their drafter's acceptance falls (past its training length, past its
sliding window).

A cycle's position is its root's: the 0-based position of the last committed token, which the drafts
extend; it equals the number of tokens before it. Buckets double in width: ``[0, w)``, ``[w, 2w)``,
``[2w, 4w)``, ... The first width ``w`` is 1024 (< 1k, 1-2k, 2-4k, 4-8k, ...) unless the probe's
furthest cycle starts before ``4 w``: then ``w`` halves (down to 16) until it does not, so prompts of a
few hundred tokens (a toy pair's, a short chat) still spread over at least three buckets instead of
landing in one. A bucket is marked ``past`` a limit (the drafter's ``max_position_embeddings``, its
``sliding_window``) when it holds positions at or beyond it: there the drafter computes at positions
it was not trained on, or sees only the last ``sliding_window`` positions. Empty buckets are left out,
so the buckets' cycles sum to the probe's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

WIDEST_FIRST, NARROWEST_FIRST = 1024, 16  # the first bucket's width: the default, and the finest
SPAN = 4  # the first width halves until the furthest cycle start lies at or past SPAN widths


def first_width(furthest: int) -> int:
    """The first bucket's width for a probe whose furthest cycle starts at ``furthest``."""
    width = WIDEST_FIRST
    while width > NARROWEST_FIRST and furthest < SPAN * width:
        width //= 2
    return width


def bucket_of(position: int, width: int) -> tuple[int, int]:
    """The ``[from, to)`` bucket holding ``position``: ``[0, width)``, then doubling."""
    if position < width:
        return 0, width
    start = width
    while position >= 2 * start:
        start *= 2
    return start, 2 * start


def accept_length_by_context(cycles: Sequence[tuple[int, int]], *, limits: dict[str, int | None]
                             ) -> list[dict[str, Any]]:
    """``cycles``: (root position, accept length) pairs; ``limits``: name -> position (None: no limit).

    One entry per non-empty bucket, in order: ``{"from", "to", "cycles", "mean_accept_length", "past"}``,
    ``past`` naming each limit the bucket reaches (``to > limit``)."""
    if not cycles:
        return []
    width = first_width(max(position for position, _ in cycles))
    sums: dict[tuple[int, int], list[int]] = {}
    for position, length in cycles:
        total = sums.setdefault(bucket_of(position, width), [0, 0])
        total[0], total[1] = total[0] + 1, total[1] + length
    return [{"from": lo, "to": hi, "cycles": count, "mean_accept_length": total / count,
             "past": [name for name, limit in limits.items() if limit is not None and hi > limit]}
            for (lo, hi), (count, total) in sorted(sums.items())]


def bucket_label(bucket: dict[str, Any]) -> str:
    """``"< 1k"``, ``"1k-2k"``, ``"256-512"``: a bucket's positions, in kibi-tokens from 1024."""
    def size(n: int) -> str:
        return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)

    lo, hi = bucket["from"], bucket["to"]
    return f"< {size(hi)}" if lo == 0 else f"{size(lo)}-{size(hi)}"


def label_start(label: str) -> int:
    """The first position of the bucket :func:`bucket_label` named ``label`` (to order buckets by name)."""
    if label.startswith("< "):
        return 0
    low = label.split("-")[0]
    return int(low[:-1]) * 1024 if low.endswith("k") else int(low)
