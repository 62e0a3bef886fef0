"""Interleaved rounds, arm statistics and the noise rule of the schedule sweep, on made-up numbers."""

from __future__ import annotations

import pytest

from draftlab.bench.rounds import ArmStats, interleaved, noise_band, within_noise
from draftlab.errors import DraftlabError


def test_every_arm_meets_every_position_and_order_alternates():
    orders = interleaved("ABC", 4)
    assert orders == [list("ABC"), list("ACB"), list("CAB"), list("CBA")]
    for order in orders:
        assert sorted(order) == list("ABC")
    first_positions = {order[0] for order in interleaved("ABC", 3)} | {order[-1] for order in interleaved("ABC", 3)}
    assert first_positions == set("ABC")
    with pytest.raises(DraftlabError, match="one round"):
        interleaved("AB", 0)


def test_stats_median_and_spread():
    s = ArmStats.of([100.0, 90.0, 130.0, 110.0, 95.0])
    assert (s.median, s.low, s.high, s.runs) == (100.0, 90.0, 130.0, 5)
    assert s.spread == pytest.approx(0.4)
    with pytest.raises(DraftlabError, match="no measured run"):
        ArmStats.of([])


def test_within_noise_uses_half_the_median_spread_of_identical_work():
    arms = [ArmStats.of(v) for v in ([100, 110, 90], [200, 220, 180], [50, 60, 40], [100, 101, 99])]
    # Spreads 0.2, 0.2, 0.4, 0.02: median 0.2, band 0.1.
    assert noise_band(arms) == pytest.approx(0.1)
    best = ArmStats.of([200.0])
    assert within_noise(ArmStats.of([181.0]), best, 0.1)
    assert not within_noise(ArmStats.of([179.0]), best, 0.1)
    assert within_noise(ArmStats.of([250.0]), best, 0.0)
