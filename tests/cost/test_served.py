"""plan --served: the reference server's costs fitted from batch times, and the predictions made from them."""

from __future__ import annotations

import pytest
from cost_fixtures import profile_doc, write_json

from draftlab.bench.predicted import load_predictions
from draftlab.cost.plan import make_plan, parse_grid
from draftlab.cost.profile import profile_from_dict
from draftlab.cost.schedule import schedule_from_plan
from draftlab.cost.served import SHORT_TOKENS, ServedCost, calibrate, fit_served
from draftlab.documents import to_jsonable
from draftlab.errors import DraftlabError


def test_fit_recovers_a_known_line():
    cost = fit_served(4, (8, 2.0 + 7 * 1.5), (128, 2.0 + 127 * 1.5))
    assert cost == ServedCost(4, step_ms=pytest.approx(1.5), batch_ms=pytest.approx(2.0), request_tokens=128)
    with pytest.raises(DraftlabError, match="short < long"):
        fit_served(1, (8, 1.0), (8, 2.0))


def test_calibrate_interleaves_and_takes_medians():
    calls = []
    # Batch b: 5 ms per batch plus b/2 ms per step; the second round of every point is disturbed (x3).
    def timer(b: int, n: int) -> float:
        calls.append((b, n))
        ms = 5.0 + (n - 1) * b / 2
        return ms * 3 if sum(1 for c in calls if c == (b, n)) == 2 else ms

    costs = calibrate([1, 2], 64, timer, rounds=3)
    assert calls[:4] == [(1, SHORT_TOKENS), (1, 64), (2, SHORT_TOKENS), (2, 64)]
    assert calls[4:8] == [(2, 64), (2, SHORT_TOKENS), (1, 64), (1, SHORT_TOKENS)]
    for c, b in zip(costs, (1, 2)):
        assert (c.step_ms, c.batch_ms, c.request_tokens) == (pytest.approx(b / 2), pytest.approx(5.0), 64)
    with pytest.raises(DraftlabError, match="longer than"):
        calibrate([1], SHORT_TOKENS, timer)


def test_plan_predicts_the_server_from_its_measured_step_and_batch_costs(tmp_path):
    doc = profile_doc()
    # Served plain step at batch 1: 10.5 ms against the bare 10 ms decode step (x1.05); at batch 8: 20.5 ms
    # against 14 (x1.46).
    doc["served"] = [{"batch_size": 1, "step_ms": 10.5, "batch_ms": 30.0, "request_tokens": 65},
                     {"batch_size": 8, "step_ms": 20.5, "batch_ms": 60.0, "request_tokens": 65}]
    profile = profile_from_dict(doc)
    plan = make_plan(profile, [], grid=parse_grid("3/1/4:2.0"))
    for b, cycle_bare, decode in ((1, 2.2 + 2 * 1.0 + 12.0 + 0.5, 10.0), (8, 3.0 + 2 * 1.2 + 30.0 + 0.5, 14.0)):
        row = plan.best[b]
        served = profile.served[0 if b == 1 else 1]
        cycle = cycle_bare * served.step_ms / decode  # slowed as the server slows a plain step
        assert row.cycle_ms == pytest.approx(cycle_bare)
        assert row.served_cycle_ms == pytest.approx(cycle)
        assert row.served_tokens_per_second == pytest.approx(b * 65 * 1000 / (served.batch_ms + 64 / 2.0 * cycle))
        assert plan.served_baseline_tokens_per_second[b] == pytest.approx(
            b * 65 * 1000 / (served.batch_ms + 64 * served.step_ms))
    assert plan.served_request_tokens == 65
    # The sweep reads the served table beside the steady-state one.
    pred = load_predictions(write_json(tmp_path / "plan.json", to_jsonable(plan)))
    assert pred.served is not None and pred.served.chain(8, 3) == pytest.approx(plan.best[8].served_tokens_per_second)
    assert pred.chain(8, 3) == pytest.approx(plan.best[8].tokens_per_second)


def test_schedule_is_chosen_by_the_served_prediction():
    doc = profile_doc()
    grid = parse_grid("1/1/2:1.2,3/1/4:2.4")
    bare = schedule_from_plan(make_plan(profile_from_dict(doc), [], grid=grid))
    doc["served"] = [{"batch_size": b, "step_ms": 30.0, "batch_ms": 40.0, "request_tokens": 65} for b in (1, 8)]
    plan = make_plan(profile_from_dict(doc), [], grid=grid)
    served = schedule_from_plan(plan)
    # The server slows every cycle by its plain step's factor and adds the same per-batch cost to every arm,
    # so the K that wins does not change; the numbers the schedule states are the served ones.
    assert [r.draft_length for r in served.ranges] == [r.draft_length for r in bare.ranges] == [3, 0]
    for r in served.ranges:
        rows = [c.served_tokens_per_second for c in plan.configs
                if c.batch_size == r.planned_batch and c.steps == r.draft_length]
        assert r.baseline_tokens_per_second == plan.served_baseline_tokens_per_second[r.planned_batch]
        assert r.tokens_per_second == (rows[0] if rows else r.baseline_tokens_per_second)
    assert any("draftlab serve" in n for n in served.notes)


def test_a_batch_size_not_served_is_refused():
    doc = profile_doc()
    doc["served"] = [{"batch_size": 1, "step_ms": 10.5, "batch_ms": 30.0, "request_tokens": 65}]
    with pytest.raises(DraftlabError, match="batch size 8 was not measured through draftlab serve"):
        make_plan(profile_from_dict(doc), [], grid=parse_grid("3/1/4:2.0"))


def test_the_plan_table_shows_the_served_column():
    from rich.console import Console

    from draftlab.report.plan import render_plan

    doc = profile_doc()
    doc["served"] = [{"batch_size": b, "step_ms": 20.0, "batch_ms": 5.0, "request_tokens": 65} for b in (1, 8)]
    plan = make_plan(profile_from_dict(doc), [], grid=parse_grid("3/1/4:2.0"))
    console = Console(record=True, width=200)
    render_plan(plan, console)
    text = console.export_text()
    assert "served tok/s" in text and f"{plan.best[8].served_tokens_per_second:.1f}" in text


def test_calibrate_times_a_batch_size_out_of_line_again():
    calls = []

    def timer(b: int, n: int) -> float:  # batch 2 is 3x slower until it is timed again
        calls.append((b, n))
        slow = 3.0 if b == 2 and len(calls) <= 18 else 1.0
        return slow * (5.0 + (n - 1) * b / 2)

    costs = calibrate([1, 2, 3], 64, timer, rounds=3)
    assert len(calls) == 18 + 6 and set(calls[18:]) == {(2, SHORT_TOKENS), (2, 64)}
    assert costs[1].step_ms == pytest.approx(1.0) and costs[1].batch_ms == pytest.approx(5.0)
