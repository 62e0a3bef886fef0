"""The cost formulas and the solver from engine numbers, on hand-computed cases."""

from __future__ import annotations

import pytest

from draftlab.cost import model
from draftlab.cost.engine_numbers import estimate_from_engine, parse_what_if
from draftlab.cost.model import SpecConfig
from draftlab.errors import DraftlabError


def test_motivating_case_kimi_on_pcie():
    # 82 tok/s plain, 52 tok/s at accept length 1.5: decode 1000/82 = 12.195 ms,
    # cycle 1.5 * 1000 / 52 = 28.846 ms, break-even 28.846 / 12.195 = 2.365.
    est = estimate_from_engine(baseline_tps=82, spec_tps=52, accept_length=1.5)
    assert est.decode_ms == pytest.approx(12.195, abs=1e-3)
    assert est.cycle_ms == pytest.approx(28.846, abs=1e-3)
    assert est.break_even_accept_length == pytest.approx(2.365, abs=1e-3)
    assert round(est.decode_ms, 1) == 12.2 and round(est.cycle_ms, 1) == 28.8
    assert round(est.break_even_accept_length, 2) == 2.37
    assert est.speedup == pytest.approx(52 / 82)
    assert "loses" in est.verdict and "2.37" in est.verdict


def test_what_ifs_predict_throughput():
    # all-reduce 25 ms of the 28.846 ms cycle; halved: cycle 16.346 ms -> 1.5 * 1000 / 16.346.
    est = estimate_from_engine(
        baseline_tps=82, spec_tps=52, accept_length=1.5, allreduce_ms=25.0,
        what_ifs=[parse_what_if("allreduce_scale=0.5"), parse_what_if("accept_length=3.2"),
                  parse_what_if("cycle_ms=20,accept_length=2")],
    )
    halved, longer, both = est.what_ifs
    assert halved.cycle_ms == pytest.approx(28.846 - 12.5, abs=1e-3)
    assert halved.tokens_per_second == pytest.approx(1500 / (28.846153846 - 12.5))
    assert halved.speedup > 1 > est.speedup  # halving communication flips the verdict
    assert longer.tokens_per_second == pytest.approx(3.2 * 52 / 1.5)
    assert longer.break_even_accept_length == pytest.approx(est.break_even_accept_length)
    assert both.tokens_per_second == pytest.approx(100.0)
    assert both.break_even_accept_length == pytest.approx(20 / (1000 / 82))


def test_allreduce_share_gives_same_answer_as_ms():
    share = estimate_from_engine(baseline_tps=82, spec_tps=52, accept_length=1.5,
                                 allreduce_share=0.5, what_ifs=[{"allreduce_scale": 0.0}])
    assert share.allreduce_ms == pytest.approx(share.cycle_ms / 2)
    assert share.what_ifs[0].cycle_ms == pytest.approx(share.cycle_ms / 2)


def test_batch_size_scales_times():
    # 800 tok/s over 8 sequences is 10 ms per decode step.
    est = estimate_from_engine(batch_size=8, baseline_tps=800, cycle_ms=25, accept_length=2.0)
    assert est.decode_ms == pytest.approx(10.0)
    assert est.tokens_per_second == pytest.approx(8 * 2.0 * 1000 / 25)
    assert est.break_even_accept_length == pytest.approx(2.5)


@pytest.mark.parametrize("kwargs, words", [
    ({"spec_tps": 52, "accept_length": 1.5}, "--baseline-tps or --decode-ms"),
    ({"baseline_tps": 82, "accept_length": 1.5}, "--spec-tps or --cycle-ms"),
    ({"baseline_tps": 82, "spec_tps": 52}, "needs --accept-length"),
    ({"baseline_tps": 0, "spec_tps": 52, "accept_length": 1.5}, "positive"),
    ({"baseline_tps": 82, "cycle_ms": -3}, "positive"),
    ({"baseline_tps": 82, "spec_tps": 52, "accept_length": 0.5}, "at least 1"),
    ({"baseline_tps": 82, "spec_tps": 52, "accept_length": 1.5, "allreduce_ms": 40},
     "below the cycle"),
])
def test_engine_numbers_bad_input(kwargs, words):
    with pytest.raises(DraftlabError, match=words):
        estimate_from_engine(**kwargs)


@pytest.mark.parametrize("text", ["speed=2", "accept_length", "accept_length=x",
                                  "cycle_ms=0", "cycle_ms=10,allreduce_scale=0.5"])
def test_bad_what_if(text):
    with pytest.raises(DraftlabError, match="--what-if"):
        parse_what_if(text)


def test_allreduce_what_if_needs_measurement():
    with pytest.raises(DraftlabError, match="--allreduce-ms"):
        estimate_from_engine(baseline_tps=82, spec_tps=52, accept_length=1.5,
                             what_ifs=[{"allreduce_scale": 0.5}])


def test_cycle_counts_draft_passes_after_extend():
    # 3 steps: the draft-extend gives step 0, then 2 passes of 1.5 ms each.
    cycle = model.cycle_breakdown(config=SpecConfig(3, 4, 8), draft_extend_ms=2.0,
                                  draft_step_ms=1.5, verify_ms=20.0, allreduce_ms=4.0,
                                  overhead_ms=0.5)
    assert cycle.draft_steps_ms == pytest.approx(3.0)
    assert cycle.total_ms == pytest.approx(2.0 + 3.0 + 20.0 + 4.0 + 0.5)
    assert SpecConfig(1, 1, 2).draft_passes == 0


def test_spec_config_rules():
    assert SpecConfig.parse(" 3/1/4 ") == SpecConfig(3, 1, 4)
    assert SpecConfig.parse("5/4/8").label == "5/4/8"
    with pytest.raises(DraftlabError, match="use 2/1/3"):
        SpecConfig(2, 1, 6)  # a chain of 2 drafted tokens verifies 3, not 6
    with pytest.raises(DraftlabError, match="offers only 2"):
        SpecConfig(1, 2, 4)
    with pytest.raises(DraftlabError, match="steps/topk/num_draft_tokens"):
        SpecConfig.parse("3-1-4")
