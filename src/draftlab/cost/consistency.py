"""Timings checked before a verdict uses them: figures that contradict each other decide nothing.

A pass over more tokens (or draft rows, or sequences) does more work, so it cannot take much less
time than a smaller one; a speculative cycle contains a verify at least as large as the decode step,
so its break-even accept length is at least 1 and no predicted speed-up exceeds its accept length.
Timings that break these rules by more than noise come from a machine too busy to time on (a 1-token
verify at 64.5 ms against 13.2 ms for 5 tokens; a "19.91x" at accept length 4.21): ``assess`` then says
the speed cannot be decided, and names the figures, instead of picking a winner from them.

A larger pass counts as faster when its median is :data:`TOLERANCE` times below the smaller one's,
unless their fast ends (p10) agree within :data:`TOLERANCE`. A GPU pass bound by host syncs times
bimodally, and a median that lands on the slow mode of one point and the fast mode of the next, over the
same floor, is noise its own repeats show (6.5 ms at the fast end for both, 8.7 against 6.8 ms medians).
A floor that differs too (a busy machine) leaves it a contradiction. The spread of every point (p90 / p10
of its interleaved repeats) is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from draftlab.cost.measurement import Measurement
from draftlab.cost.plan import Plan
from draftlab.cost.profile import Profile

TOLERANCE = 1.25  # a larger pass this many times faster than a smaller one (at the floor too) contradicts it
SECTIONS = {"verify": "verify", "draft_step": "draft step", "draft_extend": "draft-extend",
            "mtp_draft_step": "MTP draft step", "mtp_draft_extend": "MTP draft-extend"}
NOUNS = {"verify": "tokens", "draft_step": "rows", "draft_extend": "tokens", "mtp_draft_step": "rows",
         "mtp_draft_extend": "tokens"}


@dataclass(frozen=True)
class TimingCheck:
    """The contradictions found (one line each, naming the figures), the batch sizes they name, and each
    section's widest spread."""

    contradictions: list[str]
    spread: dict[str, float] = field(default_factory=dict)  # section -> the largest p90/p10 among its points
    batch_sizes: list[int] = field(default_factory=list)  # every batch size a contradiction names

    @property
    def ok(self) -> bool:
        return not self.contradictions


def check_timings(profile: Profile, plan: Plan | None = None) -> TimingCheck:
    """Every rule above on a profile and the plan made from it."""
    found: list[tuple[str, set[int]]] = []
    spread: dict[str, float] = {}
    for name, label in SECTIONS.items():
        points = getattr(profile, name)
        if not points:
            continue
        spread[name] = max(m.p90_ms / m.p10_ms if m.p10_ms > 0 else float("inf") for m in points)
        found += _must_grow(points, label, NOUNS[name])
    found += _within_accept_length(plan) if plan is not None else []
    return TimingCheck([text for text, _ in found], spread, sorted({b for _, named in found for b in named}))


def _must_grow(points: list[Measurement], label: str, noun: str) -> list[tuple[str, set[int]]]:
    """A point faster than a smaller one beyond noise (:func:`_faster`): over tokens at each batch size, and
    over batch sizes at each token count."""
    found = []
    for key, other in ((lambda m: m.tokens, lambda m: m.batch_size), (lambda m: m.batch_size, lambda m: m.tokens)):
        curves: dict[int, list[Measurement]] = {}
        for m in points:
            curves.setdefault(other(m), []).append(m)
        for curve in curves.values():
            slowest: Measurement | None = None
            for m in sorted(curve, key=key):
                if slowest is not None and _faster(m, than=slowest):
                    found.append((f"{label} over {_count(slowest.tokens, noun)} at batch {slowest.batch_size} takes "
                                  f"{_timing(slowest)}, over {_count(m.tokens, noun)} at batch {m.batch_size} "
                                  f"{_timing(m)}: the larger pass cannot be faster", {slowest.batch_size, m.batch_size}))
                if slowest is None or m.median_ms > slowest.median_ms:
                    slowest = m
    return found


def _faster(m: Measurement, *, than: Measurement) -> bool:
    """``m``'s median :data:`TOLERANCE` times below ``than``'s, and their fast ends not agreeing within it."""
    floors = sorted((m.p10_ms, than.p10_ms))
    return than.median_ms > TOLERANCE * m.median_ms and floors[1] > TOLERANCE * floors[0]


def _within_accept_length(plan: Plan) -> list[tuple[str, set[int]]]:
    """A row whose cycle is shorter than the decode step it contains: a speed-up above its accept length."""
    found = []
    for r in plan.configs:
        if r.break_even_accept_length < 1:
            found.append((f"{r.label} at batch {r.batch_size} is predicted {r.speedup:.2f}x, above what its accept "
                          f"length {r.accept_length:.2f} allows: its {r.cycle_ms:.2f} ms cycle is shorter than the "
                          f"{plan.decode_ms[r.batch_size]:.2f} ms decode step it contains (break-even "
                          f"{r.break_even_accept_length:.2f} < 1)", {r.batch_size}))
    return found


def _count(n: int, noun: str) -> str:
    return f"{n} {noun if n != 1 else noun[:-1]}"


def _timing(m: Measurement) -> str:
    return f"{m.median_ms:.2f} ms (p10 {m.p10_ms:.2f}, p90 {m.p90_ms:.2f})"
