"""Timing summaries: the measured points a profile holds (pure data, no torch).

:mod:`draftlab.cost.timing` produces them on a device; :mod:`draftlab.cost.profile` reads and writes
them, so planning from a PROFILE.json never imports the runtime.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
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
class Measurement(Timing):
    """One measured point of a cost curve: ``tokens`` per sequence at ``batch_size``, and its timing (given by
    keyword: ``Measurement(1, 4, median_ms=..., ...)``)."""

    batch_size: int
    tokens: int

    @classmethod
    def of(cls, batch_size: int, tokens: int, timing: Timing) -> Measurement:
        return cls(batch_size, tokens, **timing.__dict__)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted samples (numpy's default method)."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

