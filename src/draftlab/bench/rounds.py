"""Arms measured in interleaved rounds, their medians and spread, and what "within noise" means.

On a shared machine the load from elsewhere comes in bursts that outlast one run, so arms measured
one after the other differ by the burst, not by the arm. Every arm is therefore run once per round,
in an order that rotates from round to round (and runs backwards every other round), so each arm
meets each position and the bursts spread over all of them; an arm's number is the median of its
rounds, and its spread (the range over the median) is the measured noise of identical work.

The rule (:func:`within_noise`): arm A is at least as fast as arm B within noise when A's median is
at least B's minus the noise band, where the band is half the median relative range of the arms at
that concurrency (:func:`noise_band`): what identical work varied by there, around its median.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from draftlab.errors import DraftlabError

T = TypeVar("T")


def interleaved(arms: Sequence[T], rounds: int) -> list[list[T]]:
    """The arms' order in each round: rotated by one each round, reversed every other round."""
    if rounds < 1 or not arms:
        raise DraftlabError(f"need at least one arm and one round, got {len(arms)} and {rounds}")
    orders = []
    for r in range(rounds):
        shift = r % len(arms)
        order = list(arms[shift:]) + list(arms[:shift])
        orders.append(order if r % 2 == 0 else order[::-1])
    return orders


@dataclass(frozen=True)
class ArmStats:
    """An arm's repeated measurements: median, extremes, and the range relative to the median."""

    median: float
    low: float
    high: float
    runs: int

    @property
    def spread(self) -> float:
        """(high - low) / median: how far identical runs of this arm fell apart."""
        return (self.high - self.low) / self.median if self.median else 0.0

    @classmethod
    def of(cls, values: Sequence[float]) -> ArmStats:
        if not values:
            raise DraftlabError("an arm with no measured run has no statistics")
        return cls(statistics.median(values), min(values), max(values), len(values))


def noise_band(arms: Sequence[ArmStats]) -> float:
    """Half the median relative range of the arms (runs of identical work), as a fraction."""
    return statistics.median(a.spread for a in arms) / 2 if arms else 0.0


def within_noise(candidate: ArmStats, best: ArmStats, band: float) -> bool:
    """Is ``candidate`` at least as fast as ``best`` within ``band`` (a fraction of ``best``'s median)?"""
    return candidate.median >= best.median * (1 - band)
