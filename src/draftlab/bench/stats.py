"""Latency summaries: mean and percentiles of a sample, in milliseconds."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, linearly interpolated (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of an empty sample")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize_ms(seconds: Sequence[float]) -> dict[str, float | None]:
    """{"mean", "p50", "p90", "p99"} in milliseconds; all None for an empty sample."""
    if not seconds:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    ms = sorted(s * 1000.0 for s in seconds)
    return {
        "mean": sum(ms) / len(ms),
        "p50": percentile(ms, 50),
        "p90": percentile(ms, 90),
        "p99": percentile(ms, 99),
    }
