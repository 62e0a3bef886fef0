"""Timing summaries: the measured points a profile holds (pure data, no torch).

:mod:`draftlab.cost.timing` produces them on a device; :mod:`draftlab.cost.profile` reads and writes
them, so planning from a PROFILE.json never imports the runtime.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Summary of repeated timings of one callable, in milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    repeats: int

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> Timing:
        if not samples_ms:
            raise ValueError("no timing samples")
        ordered = sorted(samples_ms)
        return cls(
            median_ms=statistics.median(ordered),
            p10_ms=_quantile(ordered, 0.1),
            p90_ms=_quantile(ordered, 0.9),
            min_ms=ordered[0],
            max_ms=ordered[-1],
            repeats=len(ordered),
        )


@dataclass(frozen=True)
class Measurement:
    """One measured point of a cost curve: ``tokens`` per sequence at ``batch_size``."""

    batch_size: int
    tokens: int
    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    repeats: int

    @classmethod
    def of(cls, batch_size: int, tokens: int, timing: Timing) -> Measurement:
        return cls(batch_size, tokens, **timing.__dict__)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted samples (numpy's default method)."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


OUT_OF_LINE = 1.25  # a point this many times above (or below 1/this of) both neighbouring batch sizes


def out_of_line(points: Sequence[tuple[str, Measurement]]) -> set[tuple[str, int]]:
    """(section, batch size) pairs whose median stands above :data:`OUT_OF_LINE` x both neighbouring
    batch sizes' at the same token count, or below both by the same factor. A pass's cost grows
    smoothly with the batch, so such a point is a burst of load from elsewhere, not the pass."""
    curves: dict[tuple[str, int], dict[int, float]] = {}
    for section, m in points:
        curves.setdefault((section, m.tokens), {})[m.batch_size] = m.median_ms
    odd = set()
    for (section, _), by_batch in curves.items():
        batches = sorted(by_batch)
        for lo, b, hi in zip(batches, batches[1:], batches[2:]):
            here, near = by_batch[b], (by_batch[lo], by_batch[hi])
            if here > OUT_OF_LINE * max(near) or here * OUT_OF_LINE < min(near):
                odd.add((section, b))
    return odd
