"""The overhead fit recovers a decoder's own per-cycle work from timed cycles and measured passes,
and the planner adds it to every cycle and decode step."""

from __future__ import annotations

import json
from dataclasses import astuple

import pytest

from draftlab.cost.model import SpecConfig
from draftlab.cost.overhead import CycleSample, Overhead, fit_overhead
from draftlab.cost.plan import make_plan, parse_grid
from draftlab.cost.profile import CostTable, ModelInfo, Profile, load_profile, save_profile
from draftlab.cost.timing import Measurement
from draftlab.errors import DraftlabError


def _points(batch: int, sizes: range, ms) -> list[Measurement]:
    return [Measurement(batch, t, median_ms=ms(t), p10_ms=ms(t), p90_ms=ms(t), min_ms=ms(t), max_ms=ms(t), repeats=1) for t in sizes]


def _profile(overhead: list[Overhead]) -> Profile:
    return Profile(model=ModelInfo(), verify=_points(1, range(1, 9), lambda t: 10 + 0.5 * t),
                   draft_step=_points(1, range(1, 5), lambda t: 1.0 + 0.1 * t),
                   draft_extend=_points(1, range(1, 6), lambda t: 2.0 + 0.2 * t), overhead=overhead)


def test_fit_recovers_a_known_overhead():
    """A decoder whose cycles cost passes + 1.5 ms + 0.25 ms per draft step (+ 0.8 ms for a tree), and
    decode steps pass + 0.7 ms."""
    truth = Overhead(1, decode_ms=0.7, cycle_ms=1.5, draft_step_ms=0.25, tree_ms=0.8)
    table = CostTable.of(_profile([]))

    def run(batch: int, config: SpecConfig | None) -> CycleSample:
        if config is None:
            return CycleSample(table.decode_pass_ms(batch) + truth.decode_ms, 1.0)
        accept = 1.0 + 0.3 * config.steps
        return CycleSample(table.passes_ms(batch, config, accept) + truth.of(config), accept)

    fitted = fit_overhead(1, run, table.passes_ms, table.decode_pass_ms(1))
    assert astuple(fitted) == pytest.approx(astuple(truth))


def test_plan_adds_the_measured_overhead(tmp_path):
    own = Overhead(1, decode_ms=0.5, cycle_ms=2.0, draft_step_ms=0.5, tree_ms=1.25)
    grid = parse_grid("3/1/4:2.5,3/4/8:2.5")
    bare = make_plan(_profile([]), [], grid=grid)
    path = save_profile(_profile([own]), tmp_path / "p.json")
    loaded = load_profile(path)
    assert loaded.overhead == [own]
    plan = make_plan(loaded, [], grid=grid)
    chain, tree = plan.configs
    assert chain.cycle_ms == pytest.approx(bare.configs[0].cycle_ms + 2.0 + 2 * 0.5)  # no tree term
    assert tree.cycle_ms == pytest.approx(bare.configs[1].cycle_ms + 2.0 + 2 * 0.5 + 1.25)
    assert plan.decode_ms[1] == pytest.approx(bare.decode_ms[1] + 0.5)
    assert chain.overhead_ms == pytest.approx(3.0)


def test_a_profile_without_a_tree_overhead_still_loads(tmp_path):
    path = save_profile(_profile([Overhead(1, 0.5, 2.0, 0.5, tree_ms=1.0)]), tmp_path / "p.json")
    raw = json.loads(path.read_text())
    del raw["overhead"][0]["tree_ms"]
    path.write_text(json.dumps(raw))
    assert load_profile(path).overhead == [Overhead(1, 0.5, 2.0, 0.5)]


def test_negative_overhead_in_a_profile_is_refused(tmp_path):
    path = save_profile(_profile([Overhead(1, -1.0, 0.0, 0.0)]), tmp_path / "p.json")
    with pytest.raises(DraftlabError, match=r"overhead\[0\]\.decode_ms"):
        load_profile(path)


def test_a_batch_size_whose_cycles_are_out_of_line_is_fitted_again():
    """Batch 2's first cycles are slowed 3x by load from elsewhere: its fit is redone and the calm one kept."""
    from draftlab.cost.profiler import _fit_overheads

    batches = (1, 2, 3)
    profile = Profile(model=ModelInfo(), verify=[m for b in batches for m in _points(b, range(1, 9), lambda t: 10 + t)],
                      draft_step=[m for b in batches for m in _points(b, range(1, 5), lambda t: 1.0 + 0.1 * t)],
                      draft_extend=[m for b in batches for m in _points(b, range(1, 6), lambda t: 2.0)])
    table = CostTable.of(profile)
    truth = Overhead(1, decode_ms=0.7, cycle_ms=1.5, draft_step_ms=0.25, tree_ms=0.8)
    calls: list[int] = []

    def run(batch: int, config: SpecConfig | None) -> CycleSample:
        calls.append(batch)
        slow = 3.0 if batch == 2 and calls.count(2) <= 4 else 1.0  # its first fit: 4 runs (plain + 3 configs)
        if config is None:
            return CycleSample(slow * (table.decode_pass_ms(batch) + truth.decode_ms), 1.0)
        return CycleSample(slow * (table.passes_ms(batch, config, 2.0) + truth.of(config)), 2.0)

    fits = _fit_overheads(run, table, batches)
    assert calls == [1] * 4 + [2] * 4 + [3] * 4 + [2] * 4
    for fit in fits:
        assert (fit.decode_ms, fit.cycle_ms, fit.draft_step_ms, fit.tree_ms) == pytest.approx(astuple(truth)[1:])
