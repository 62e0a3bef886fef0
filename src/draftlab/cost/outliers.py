"""Measurements out of line with their neighbouring batch sizes: what a profile measures again.

A cost grows smoothly with the batch size, so a point far above (or below) both neighbouring batch
sizes on the same curve is a burst of load from elsewhere on a shared machine, not the work. The
profile's passes (:func:`draftlab.cost.timing.measure_jobs`), the decoder's cycles
(:func:`draftlab.cost.profiler.profile_costs`) and the served calibration (:mod:`draftlab.cost.served`)
measure such a batch size again and keep the calmer measurement (load only adds time).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

OUT_OF_LINE = 1.25  # a point this many times above (or below 1/this of) both neighbouring batch sizes

K = TypeVar("K", bound=Hashable)


def out_of_line(curves: Mapping[K, Mapping[int, float]]) -> set[tuple[K, int]]:
    """(curve, batch size) pairs whose value is above :data:`OUT_OF_LINE` x both neighbouring batch
    sizes' on the same curve, or below both by the same factor (end points have one neighbour: kept)."""
    odd = set()
    for key, by_batch in curves.items():
        batches = sorted(by_batch)
        for lo, b, hi in zip(batches, batches[1:], batches[2:]):
            here, near = by_batch[b], (by_batch[lo], by_batch[hi])
            if here > OUT_OF_LINE * max(near) or here * OUT_OF_LINE < min(near):
                odd.add((key, b))
    return odd
