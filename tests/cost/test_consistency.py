"""Timings checked before a verdict uses them (cost/consistency.py): a larger pass may not be much faster than
a smaller one, and no cycle shorter than the decode step inside it; a dip within noise is pooled with its
neighbours, so every predicted speed-up stays within its accept length."""

from __future__ import annotations

from draftlab.cost.consistency import check_timings
from draftlab.cost.model import SpecConfig
from draftlab.cost.plan import GridEntry, ModelFreeEntry, make_plan
from draftlab.cost.profile import FORMAT, CostTable, nondecreasing, profile_from_dict


def point(b: int, t: int, ms: float, spread: float = 1.0) -> dict:
    return {"batch_size": b, "tokens": t, "median_ms": ms, "p10_ms": ms / spread, "p90_ms": ms * spread,
            "min_ms": ms / spread, "max_ms": ms * spread, "repeats": 5}


def profile(verify: dict[tuple[int, int], float], overhead: list[dict] | None = None):
    return profile_from_dict({
        "format": FORMAT, "model": {"target": "t"},
        "verify": [point(b, t, ms, 1.5 if t == 1 else 1.0) for (b, t), ms in verify.items()],
        "draft_step": [point(b, 1, 0.5) for b in (1, 8)],
        "draft_extend": [point(b, t, 0.6) for b in (1, 8) for t in range(1, 5)],
        "overhead_ms": 0.0, "overhead": overhead or [],
    })


def plan(prof):
    grid = [GridEntry(SpecConfig(3, 1, 4), 3.0), GridEntry(SpecConfig(1, 1, 2), 1.8)]
    return make_plan(prof, [], grid=grid, model_free=[ModelFreeEntry("ngram", 4, 2.5, 0.4, "test")])


CALM = {(b, t): 10.0 * (1 if b == 1 else 2) + 0.1 * t for b in (1, 8) for t in (1, 2, 4, 5)}


def test_consistent_timings_pass_and_report_their_spread():
    check = check_timings(prof := profile(CALM), plan(prof))
    assert check.ok and check.contradictions == []
    assert check.spread["verify"] == 1.5 ** 2 and check.spread["draft_step"] == 1.0


def test_a_dip_within_noise_is_pooled():
    """1 token 5% slower than 2: noise, not a contradiction; the plan reads both at their mean, so no cycle
    undercuts the decode step and no speed-up exceeds its accept length."""
    dipped = {**CALM, (1, 2): CALM[1, 1] / 1.05}
    p = plan(prof := profile(dipped))
    assert check_timings(prof, p).ok
    for r in p.configs:
        assert r.break_even_accept_length >= 1 and r.speedup <= r.accept_length


def test_a_median_on_the_slow_mode_is_noise_over_the_same_floor():
    """The H100's toy DeepSeek-V3 verify (host-sync bound, bimodal): 3 tokens' median landed on the slow mode,
    8.69 ms against 6.83 for 4 tokens, yet both points ran in 6.5 ms at their fast end. Not a contradiction;
    the plan pools the spike with the larger passes instead of carrying it to all of them. Where the fast
    ends differ as well (3 tokens never under 8.4 ms), it is one."""
    def gpu_profile(three_tokens_p10: float, four_tokens_p90: float):
        verify = [{"batch_size": 1, "tokens": t, "median_ms": med, "p10_ms": p10, "p90_ms": p90, "min_ms": p10,
                   "max_ms": p90, "repeats": 30}
                  for t, med, p10, p90 in ((1, 6.40, 6.30, 6.60), (2, 6.50, 6.35, 6.90),
                                           (3, 8.69, three_tokens_p10, 9.25), (4, 6.83, 6.58, four_tokens_p90),
                                           (8, 6.56, 6.47, 6.64))]
        return profile_from_dict({"format": FORMAT, "model": {"target": "t"}, "verify": verify,
                                  "draft_step": [point(1, 1, 0.5)],
                                  "draft_extend": [point(1, t, 0.6) for t in range(1, 5)], "overhead_ms": 0.0})

    measured = gpu_profile(three_tokens_p10=6.47, four_tokens_p90=10.21)
    assert check_timings(measured).ok
    verify = CostTable.of(measured).verify
    assert [round(verify.at(1, t), 2) for t in (1, 2, 3, 4, 8)] == [6.40, 6.50, 7.36, 7.36, 7.36]
    apart = check_timings(gpu_profile(three_tokens_p10=8.40, four_tokens_p90=7.10)).contradictions
    assert any(c.startswith("verify over 3 tokens at batch 1 takes 8.69 ms") and "over 4 tokens" in c for c in apart)


def test_nondecreasing_pools_what_falls():
    assert nondecreasing([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert nondecreasing([5.0, 1.0, 0.0, 6.0]) == [2.0, 2.0, 2.0, 6.0]
    assert nondecreasing([1.0, 2.0]) == [1.0, 2.0]


def test_a_1_token_verify_slower_than_5_tokens_is_named():
    noisy = {**CALM, (1, 1): 64.5}
    check = check_timings(prof := profile(noisy), plan(prof))
    assert not check.ok
    assert any(c.startswith("verify over 1 token at batch 1 takes 64.50 ms (p10 43.00, p90 96.75), over 2 tokens")
               for c in check.contradictions)
    smaller_batch = {**CALM, (1, 4): 50.0}  # batch 1 slower than batch 8 at 4 tokens
    assert any("at batch 1 takes 50.00 ms" in c and "at batch 8" in c
               for c in check_timings(profile(smaller_batch)).contradictions)


def test_a_cycle_shorter_than_the_decode_step_is_a_contradiction():
    """The decoder's measured per-step work above its per-cycle work: a cycle predicted cheaper than a decode
    step, a speed-up above the accept length. The model-free cycle includes the decode step's own work."""
    own = [{"batch_size": b, "decode_ms": 30.0, "cycle_ms": 0.0, "draft_step_ms": 0.0} for b in (1, 8)]
    p = plan(prof := profile(CALM, own))
    free = next(r for r in p.configs if r.method == "ngram")
    assert free.break_even_accept_length >= 1 and free.overhead_ms == 30.0
    found = check_timings(prof, p).contradictions
    assert found and all("above what its accept length" in c for c in found)
    assert any(c.startswith("3/1/4 at batch 1 is predicted") for c in found)
