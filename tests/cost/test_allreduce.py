"""The all-reduce profiler over two gloo processes on the CPU (small sizes, a few seconds)."""

from __future__ import annotations

import pytest
from cost_fixtures import profile_doc

from draftlab.cost.allreduce import measure_allreduce
from draftlab.cost.plan import make_plan, parse_grid
from draftlab.cost.profile import nondecreasing, profile_from_dict
from draftlab.documents import to_jsonable
from draftlab.errors import DraftlabError


def test_two_gloo_processes_time_every_point():
    costs = measure_allreduce(tp=2, hidden_size=16, num_layers=3, batch_sizes=[1, 2],
                              tokens=[1, 4, 8], backend="gloo", dtype="float32",
                              warmup=1, repeats=3, progress=False)
    assert costs.backend == "gloo" and costs.tp == 2
    assert costs.calls_per_forward == 6  # two all-reduces per layer
    assert [(m.batch_size, m.tokens) for m in costs.points] == [
        (1, 1), (1, 4), (1, 8), (2, 1), (2, 4), (2, 8)]
    for m in costs.points:
        assert m.repeats == 3
        assert 0 < m.min_ms <= m.p10_ms <= m.median_ms <= m.p90_ms <= m.max_ms

    # The measured section drops into a profile and the plan charges it to every forward.
    doc = profile_doc()
    doc["verify"], doc["draft_step"], doc["draft_extend"] = (
        doc["verify"][:3], doc["draft_step"][:2], doc["draft_extend"][:2])
    doc["allreduce"] = to_jsonable(costs)
    plan = make_plan(profile_from_dict(doc), [], grid=parse_grid("3/1/4:2.5"))
    # an all-reduce over more tokens costs at least one over fewer: batch 1's medians read non-decreasing
    ar = dict(zip((1, 4, 8), nondecreasing([m.median_ms for m in costs.points if m.batch_size == 1])))
    assert plan.decode_ms[1] == pytest.approx(10.0 + 6 * ar[1])
    assert plan.best[1].allreduce_ms == pytest.approx(6 * ar[4])  # verify of 4 tokens


def test_needs_two_processes():
    with pytest.raises(DraftlabError, match="--tp must be at least 2"):
        measure_allreduce(tp=1, hidden_size=16, num_layers=1, batch_sizes=[1], tokens=[1])
