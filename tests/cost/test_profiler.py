"""The measurement harness and profiler on the CPU with plain torch callables."""

from __future__ import annotations

import time

import pytest
import torch

from draftlab.cost.plan import make_plan, parse_grid
from draftlab.cost.profile import ModelInfo, load_profile, nondecreasing, save_profile
from draftlab.cost.profiler import Workload, profile_costs
from draftlab.cost.timing import Timing, time_callable
from draftlab.errors import DraftlabError

CPU = torch.device("cpu")


def matmul_pass(calls: list[tuple[int, int]], weight: torch.Tensor):
    """A pass whose work grows with batch x tokens; records each (b, t) it is prepared for."""
    def factory(b: int, t: int):
        calls.append((b, t))
        x = torch.randn(b * t, weight.shape[0])
        return lambda: x @ weight
    return factory


def test_timing_stats_are_ordered_quantiles():
    t = Timing.of([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (t.min_ms, t.median_ms, t.max_ms, t.repeats) == (1.0, 3.0, 5.0, 5)
    assert t.p10_ms == pytest.approx(1.4) and t.p90_ms == pytest.approx(4.6)


def test_time_callable_warms_up_then_times_each_call():
    calls = []

    def fn():
        calls.append(1)
        if len(calls) > 2:  # the two warm-up calls return at once, the timed ones sleep 2 ms
            time.sleep(0.002)

    timing = time_callable(fn, device=CPU, warmup=2, repeats=7)
    assert len(calls) == 9 and timing.repeats == 7
    # Only the calls after the warm-up are timed, in milliseconds: a sleep lasts at least as long as
    # asked, so every sample is >= 2 ms (a timed warm-up call, or seconds, would fall far below).
    assert timing.min_ms >= 1.9
    assert timing.min_ms <= timing.p10_ms <= timing.median_ms <= timing.p90_ms <= timing.max_ms
    with pytest.raises(DraftlabError, match="repeats >= 1"):
        time_callable(lambda: None, device=CPU, repeats=0)


def test_profile_round_trip_and_plan(tmp_path):
    torch.manual_seed(0)
    w = torch.randn(32, 32)
    prepared: dict[str, list] = {"verify": [], "draft_step": [], "draft_extend": []}
    workload = Workload(
        model=ModelInfo(target="toy", hidden_size=32, num_layers=1),
        device=CPU,
        verify=matmul_pass(prepared["verify"], w),
        draft_step=matmul_pass(prepared["draft_step"], w),
        draft_extend=matmul_pass(prepared["draft_extend"], w),
        context_tokens=16,
    )
    prof = profile_costs(workload, batch_sizes=[1, 2], verify_tokens=[1, 2, 4],
                         draft_rows=[1], extend_tokens=[1, 2, 3, 4], warmup=1, repeats=3,
                         overhead_ms=0.25, progress=False)
    # Three rounds of one call each, every other round backwards, each preparing its job afresh.
    order = [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4)]
    assert prepared["verify"] == order + order[::-1] + order
    assert prepared["draft_step"] == [(1, 1), (2, 1), (2, 1), (1, 1), (1, 1), (2, 1)]
    assert all(m.median_ms > 0 and m.repeats == 3 for m in prof.verify + prof.draft_extend)
    assert prof.timer == "perf_counter" and prof.environment["torch"] == torch.__version__

    path = save_profile(prof, tmp_path / "profile.json")
    again = load_profile(path)
    assert again.verify == prof.verify and again.model == prof.model
    assert again.overhead_ms == 0.25 and again.context_tokens == 16

    plan = make_plan(again, [], grid=parse_grid("3/1/4:2"))
    med = {(s, m.batch_size, m.tokens): m.median_ms
           for s in ("verify", "draft_step", "draft_extend") for m in getattr(prof, s)}

    def cost(section: str, b: int, tokens: int) -> float:  # a curve's medians, read through a non-decreasing fit
        curve = sorted((t, ms) for (s, bb, t), ms in med.items() if (s, bb) == (section, b))
        return dict(zip([t for t, _ in curve], nondecreasing([ms for _, ms in curve])))[tokens]

    for b in (1, 2):
        cycle = cost("draft_extend", b, 2) + 2 * cost("draft_step", b, 1) + cost("verify", b, 4) + 0.25
        assert plan.best[b].cycle_ms == pytest.approx(cycle)
        assert plan.best[b].tokens_per_second == pytest.approx(b * 2 * 1000 / cycle)
        assert plan.baseline_tokens_per_second[b] == pytest.approx(b * 1000 / cost("verify", b, 1))


def test_profile_needs_decode_point():
    workload = Workload(model=ModelInfo(), device=CPU, verify=lambda b, t: (lambda: None))
    with pytest.raises(DraftlabError, match="must include 1"):
        profile_costs(workload, batch_sizes=[1], verify_tokens=[2, 4], progress=False)


def test_measure_jobs_splits_repeats_over_rounds_and_remeasures_a_spike(monkeypatch):
    from draftlab.cost import timing
    from draftlab.cost.timing import Job, measure_jobs

    calls: list[tuple[int, int]] = []  # (batch size, timed calls) per sampling

    def fake_samples(fn, *, device, warmup, repeats):
        b = fn()
        calls.append((b, repeats))
        first_pass = sum(1 for c in calls if c[0] == b) <= 3
        return [10.0 * b * (5 if b == 3 and first_pass else 1)] * repeats  # batch 3 spikes in its first rounds

    monkeypatch.setattr(timing, "time_samples", fake_samples)
    jobs = [Job("verify", b, 1, (lambda b=b: (lambda: b))) for b in (1, 2, 3, 4, 5)]
    out = measure_jobs(jobs, device=CPU, warmup=0, repeats=7, rounds=3, progress=False)
    first = calls[:15]
    assert [r for _, r in first] == [3] * 5 + [2] * 5 + [2] * 5  # 7 calls over 3 rounds
    assert [b for b, _ in first] == [1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5]
    assert [b for b, _ in calls[15:]] == [3, 3, 3]  # only the out-of-line batch size, measured again
    m = {p.batch_size: p for p in out["verify"]}
    assert m[3].repeats == 7 and m[2].repeats == 7
    assert m[3].median_ms == 30.0  # the calm second measurement replaced the spike


def test_out_of_line_flags_a_point_above_or_below_both_neighbours():
    from draftlab.cost.outliers import out_of_line

    def curve(values):
        return {"verify": dict(enumerate(values, start=1))}

    assert out_of_line(curve([1.0, 1.1, 1.2, 1.3])) == set()
    assert out_of_line(curve([1.0, 3.0, 1.2, 1.3])) == {("verify", 2)}
    assert out_of_line(curve([1.0, 1.1, 0.5, 1.3])) == {("verify", 3)}
    assert out_of_line(curve([1.0, 1.1, 1.2, 9.0])) == set()  # an end point has one neighbour: left alone
