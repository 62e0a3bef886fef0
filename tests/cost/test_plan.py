"""The planner on a made-up profile whose predictions are computed by hand (see cost_fixtures)."""

from __future__ import annotations

import json

import pytest
from cost_fixtures import point, profile_doc, write_json

from draftlab.cost.model import SpecConfig
from draftlab.cost.plan import make_plan, parse_grid
from draftlab.cost.probes import load_probes
from draftlab.cost.profile import load_profile, profile_from_dict
from draftlab.errors import DraftlabError


def by_key(plan):
    return {(r.label, r.batch_size): r for r in plan.configs}


def test_hand_computed_predictions(profile_file, probe_file):
    plan = make_plan(load_profile(profile_file), load_probes([probe_file]),
                     grid=parse_grid("3/1/4,2/4/6:2.2"))
    rows = by_key(plan)
    assert plan.baseline_tokens_per_second == pytest.approx({1: 100.0, 8: 8000 / 14})

    # 3/1/4, batch 1, accept 2.5: extend at 2.5 tokens = 2.0 + 0.6 * 1.5/3 = 2.3;
    # 2 passes x 1.0; verify(4) = 12; overhead 0.5 -> 16.8 ms; 2.5 * 1000 / 16.8 tok/s.
    r = rows[("3/1/4", 1)]
    assert (r.draft_extend_ms, r.draft_steps_ms, r.verify_ms) == pytest.approx((2.3, 2.0, 12.0))
    assert r.cycle_ms == pytest.approx(16.8)
    assert r.tokens_per_second == pytest.approx(2500 / 16.8)
    assert r.speedup == pytest.approx(25 / 16.8)
    assert r.break_even_accept_length == pytest.approx(1.68)
    assert r.accept_length_source == str(probe_file)

    # 3/1/4, batch 8: 2.5 + 1.5 * 0.5 + 2 x 1.2 + 30 + 0.5 = 36.15 ms -> 8 * 2.5 * 1000 / 36.15.
    r8 = rows[("3/1/4", 8)]
    assert r8.cycle_ms == pytest.approx(36.15)
    assert r8.tokens_per_second == pytest.approx(20000 / 36.15)
    assert r8.speedup < 1

    # 2/4/6 (accept 2.2 given), batch 1: 2.0 + 0.6 * 1.2/3 + 1 x 1.5 + verify(6) = 14 + 0.5.
    t = rows[("2/4/6", 1)]
    assert t.cycle_ms == pytest.approx(2.24 + 1.5 + 14.0 + 0.5)
    assert t.accept_length_source == "--grid"
    # batch 8: 2.5 + 1.5 * 0.4 + 3.0 + verify(6) = 40 + 0.5.
    assert rows[("2/4/6", 8)].cycle_ms == pytest.approx(3.1 + 3.0 + 40.0 + 0.5)

    assert plan.best[1].label == "3/1/4" and plan.best[8].label == "3/1/4"
    assert "At batch 1, 3/1/4 is best" in plan.verdict
    # verify at batch 8 costs 30 / 14 = 2.1 decode steps
    assert "Speculation loses at batch 8 on this hardware: verify costs 2.1 decode steps" in (
        plan.verdict)


def test_allreduce_adds_to_decode_and_verify(tmp_path, probe_file):
    prof = profile_from_dict(profile_doc(allreduce=True))
    plan = make_plan(prof, load_probes([probe_file]))
    # decode = 10 + 4 x 0.5 = 12 ms; cycle = 16.8 + 4 x 1.0 = 20.8 ms.
    assert plan.decode_ms[1] == pytest.approx(12.0)
    r = plan.best[1]
    assert r.allreduce_ms == pytest.approx(4.0)
    assert r.cycle_ms == pytest.approx(20.8)
    assert r.tokens_per_second == pytest.approx(2500 / 20.8)
    assert "all-reduce 19%" in plan.verdict


def test_probe_list_and_per_batch_results(tmp_path, profile_file):
    probes = write_json(tmp_path / "probes.json", [
        {"config": {"steps": 3, "topk": 1, "num_draft_tokens": 4}, "mean_accept_length": 2.5},
        {"config": {"steps": 3, "topk": 1, "num_draft_tokens": 4}, "mean_accept_length": 2.0,
         "batch_size": 8},
    ])
    rows = by_key(make_plan(load_profile(profile_file), load_probes([probes])))
    assert rows[("3/1/4", 1)].accept_length == 2.5
    assert rows[("3/1/4", 8)].accept_length == 2.0  # the batch-8 result wins at batch 8
    assert rows[("3/1/4", 8)].accept_length_source == f"{probes}[1]"


def test_batch_size_subset(profile_file, probe_file):
    plan = make_plan(load_profile(profile_file), load_probes([probe_file]), batch_sizes=[8])
    assert set(plan.best) == {8} and {r.batch_size for r in plan.configs} == {8}


def test_json_contract_keys(profile_file, probe_file):
    from draftlab.documents import to_jsonable

    doc = json.loads(json.dumps(to_jsonable(
        make_plan(load_profile(profile_file), load_probes([probe_file])))))
    assert set(doc["baseline_tokens_per_second"]) == {"1", "8"}
    keys = {"steps", "topk", "num_draft_tokens", "batch_size", "accept_length", "cycle_ms",
            "tokens_per_second", "speedup", "break_even_accept_length"}
    assert keys <= set(doc["configs"][0]) and keys <= set(doc["best"]["8"])


# ---- bad input -------------------------------------------------------------------------------

def test_grid_config_without_accept_length(profile_file, probe_file):
    with pytest.raises(DraftlabError, match="config 5/4/8 at batch size 1 has no probe result"):
        make_plan(load_profile(profile_file), load_probes([probe_file]),
                  grid=parse_grid("3/1/4,5/4/8"))


def test_missing_measurement_for_grid_config(profile_file, probe_file):
    # 8/1/9 verifies 9 tokens; verify was measured up to 8.
    with pytest.raises(DraftlabError, match="outside the measured range 1..8"):
        make_plan(load_profile(profile_file), load_probes([probe_file]),
                  grid=parse_grid("8/1/9:3"))


def test_profile_without_drafter(tmp_path, probe_file):
    doc = profile_doc()
    doc["draft_step"] = doc["draft_extend"] = []
    with pytest.raises(DraftlabError, match="--drafter"):
        make_plan(profile_from_dict(doc), load_probes([probe_file]))


def test_probe_for_other_model(tmp_path, profile_file):
    probe = write_json(tmp_path / "p.json", {
        "config": {"steps": 3, "topk": 1, "num_draft_tokens": 4}, "mean_accept_length": 2.5,
        "target": {"hidden_size": 4096, "num_layers": 32}})
    with pytest.raises(DraftlabError, match="hidden_size 4096 .* hidden_size 64"):
        make_plan(load_profile(profile_file), load_probes([probe]))


def test_probe_for_unprofiled_batch(tmp_path, profile_file):
    probe = write_json(tmp_path / "p.json", {
        "config": {"steps": 3, "topk": 1, "num_draft_tokens": 4}, "mean_accept_length": 2.5,
        "batch_size": 32})
    with pytest.raises(DraftlabError, match="batch size 32.*profiled at batch sizes 1, 8"):
        make_plan(load_profile(profile_file), load_probes([probe]))


def test_unprofiled_batch_requested(profile_file, probe_file):
    with pytest.raises(DraftlabError, match="batch size 4 was not profiled"):
        make_plan(load_profile(profile_file), load_probes([probe_file]), batch_sizes=[4])


@pytest.mark.parametrize("ms", [0.0, -1.0, "fast"])
def test_nonpositive_times(ms):
    doc = profile_doc()
    doc["verify"][2] = point(1, 8, 1.0) | {"median_ms": ms}
    with pytest.raises(DraftlabError, match=r"verify\[2\]\.median_ms .* must be positive"):
        profile_from_dict(doc)


def test_bad_profile_files(tmp_path):
    with pytest.raises(DraftlabError, match="no such file"):
        load_profile(tmp_path / "missing.json")
    with pytest.raises(DraftlabError, match="not a readable JSON"):
        load_profile(_text(tmp_path / "bad.json", "{oops"))
    with pytest.raises(DraftlabError, match="not a draftlab profile"):
        load_profile(write_json(tmp_path / "other.json", {"verify": []}))
    dup = profile_doc()
    dup["verify"].append(point(1, 4, 3.0))
    with pytest.raises(DraftlabError, match="repeats batch 1, tokens 4"):
        profile_from_dict(dup)


@pytest.mark.parametrize("probe, words", [
    ({"mean_accept_length": 2}, "not a probe result"),
    ({"config": {"steps": 3, "topk": 1}, "mean_accept_length": 2}, "integer steps"),
    ({"config": {"steps": 3, "topk": 1, "num_draft_tokens": 4}, "mean_accept_length": 5},
     "not between 1 and steps"),
    ([], "empty list"),
])
def test_bad_probes(tmp_path, probe, words):
    with pytest.raises(DraftlabError, match=words):
        load_probes([write_json(tmp_path / "p.json", probe)])


def test_same_config_probed_twice(tmp_path, probe_file):
    with pytest.raises(DraftlabError, match="two probe results"):
        load_probes([probe_file, probe_file])


def test_grid_parsing():
    assert [(e.config, e.accept_length) for e in parse_grid("3/1/4:2.5, 5/4/8")] == [
        (SpecConfig(3, 1, 4), 2.5), (SpecConfig(5, 4, 8), None)]
    with pytest.raises(DraftlabError, match="between 1 and 4"):
        parse_grid("3/1/4:7")


def _text(path, text):
    path.write_text(text)
    return path
