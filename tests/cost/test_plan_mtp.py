"""``plan`` prices the target's own MTP head with the profiled cost of its own passes (profile --drafter mtp),
beside the drafter's configs, on a made-up profile whose cycles are computed by hand (see cost_fixtures)."""

from __future__ import annotations

import json

import pytest
from cost_fixtures import point, profile_doc, write_json

from draftlab.cli import main
from draftlab.cost.consistency import check_timings
from draftlab.cost.plan import make_plan
from draftlab.cost.probes import load_probes
from draftlab.cost.profile import load_profile, profile_from_dict


def mtp_profile() -> dict:
    """profile_doc's passes, plus an MTP head whose passes cost 3x the drafter's (an MLA + MoE layer)."""
    doc = profile_doc()
    doc["mtp_draft_step"] = [point(1, 1, 3.0), point(1, 4, 4.5), point(8, 1, 3.6), point(8, 4, 9.0)]
    doc["mtp_draft_extend"] = [point(1, 1, 6.0), point(1, 4, 7.8), point(8, 1, 7.5), point(8, 4, 12.0)]
    doc["mtp"] = {"engine": "sglang", "engine_version": "0.5.22", "drafter_kind": "mtp", "mtp_layer": "model.layers.4"}
    return doc


def mtp_probe(tmp_path, steps: int, topk: int, tokens: int, accept: float, name: str = "mtp.json"):
    """A probe --drafter mtp --json result (its config names the drafter kind)."""
    return write_json(tmp_path / name, {"config": {"steps": steps, "topk": topk, "num_draft_tokens": tokens,
                                                   "drafter": "mtp", "drafter_kind": "mtp"},
                                        "mean_accept_length": accept})


def test_mtp_configs_are_priced_by_the_heads_own_passes(tmp_path, probe_file):
    costs = write_json(tmp_path / "profile.json", mtp_profile())
    probes = load_probes([probe_file, mtp_probe(tmp_path, 3, 1, 4, 3.2)])
    assert [p.method for p in probes] == ["eagle3", "mtp"]
    plan = make_plan(load_profile(costs), [p for p in probes if p.method == "eagle3"],
                     mtp=[p for p in probes if p.method == "mtp"])
    rows = {(r.label, r.batch_size): r for r in plan.configs}
    # mtp 3/1/4, batch 1, accept 3.2: extend at 3.2 tokens = 6.0 + 1.8 * 2.2/3 = 7.32; 2 passes x 3.0;
    # verify(4) = 12; overhead 0.5 -> 25.82 ms
    head = rows[("mtp 3/1/4", 1)]
    assert head.method == "mtp"
    assert (head.draft_extend_ms, head.draft_steps_ms, head.verify_ms) == pytest.approx((7.32, 6.0, 12.0))
    assert head.cycle_ms == pytest.approx(25.82)
    assert head.tokens_per_second == pytest.approx(3200 / 25.82)
    # the drafter's 3/1/4 at 2.5 keeps its own passes (16.8 ms, as test_plan computes): cheaper per cycle, yet
    # the head's longer accept length wins at batch 1
    assert rows[("3/1/4", 1)].cycle_ms == pytest.approx(16.8)
    assert 3200 / 25.82 < 2500 / 16.8 and plan.best[1].label == "3/1/4"
    # batch 8: 7.5 + 4.5 * 2.2/3 + 2 x 3.6 + 30 + 0.5
    assert rows[("mtp 3/1/4", 8)].cycle_ms == pytest.approx(7.5 + 3.3 + 7.2 + 30.0 + 0.5)


def test_a_tree_of_the_head_is_priced_by_its_step_over_the_trees_rows(tmp_path):
    costs = write_json(tmp_path / "profile.json", mtp_profile())
    plan = make_plan(load_profile(costs), [], grid=[], mtp=load_probes([mtp_probe(tmp_path, 2, 4, 8, 2.5)]))
    row = {(r.label, r.batch_size): r for r in plan.configs}[("mtp 2/4/8", 1)]
    assert row.draft_steps_ms == pytest.approx(4.5)  # one pass over 4 rows
    assert row.verify_ms == pytest.approx(16.0)


def test_plan_cli_prices_an_mtp_probe_and_names_it(tmp_path, capsys, probe_file):
    costs = write_json(tmp_path / "profile.json", mtp_profile())
    head = mtp_probe(tmp_path, 3, 1, 4, 4.0)
    code = main(["plan", "--costs", str(costs), "--probe", str(probe_file), "--probe", str(head), "--json"])
    assert code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    methods = {(r["method"], r["batch_size"]) for r in doc["configs"]}
    assert methods == {("eagle3", 1), ("eagle3", 8), ("mtp", 1), ("mtp", 8)}
    assert doc["best"]["1"]["method"] == "mtp"  # 4 tokens per 26.3 ms beat 2.5 per 16.8
    assert "mtp 3/1/4 is best" in doc["verdict"]


def test_an_mtp_probe_without_the_heads_passes_is_one_line(tmp_path, capsys):
    costs = write_json(tmp_path / "profile.json", profile_doc())
    head = mtp_probe(tmp_path, 3, 1, 4, 3.2)
    assert main(["plan", "--costs", str(costs), "--probe", str(head)]) == 2
    err = capsys.readouterr().err
    assert "MTP head" in err and "profile --drafter mtp" in err and "Traceback" not in err


def test_the_heads_passes_round_trip_and_are_checked_like_the_drafters(tmp_path):
    doc = mtp_profile()
    doc["mtp_draft_step"][1] = point(1, 4, 0.5)  # 4 rows 6x faster than 1: a contradiction
    profile = profile_from_dict(doc)
    assert profile.mtp == doc["mtp"] and len(profile.mtp_draft_extend) == 4
    found = check_timings(profile).contradictions
    assert len(found) == 1 and found[0].startswith("MTP draft step over 1 row at batch 1")


def test_profile_drafter_mtp_times_the_heads_passes_and_names_its_engine(mtp_toy, tmp_path, capsys):
    out = tmp_path / "profile.json"
    code = main(["profile", "--target", str(mtp_toy.target_dir), "--drafter", "mtp", "--engine", "vllm",
                 "--device", "cpu", "--dtype", "float32", "--verify-tokens", "1,2", "--draft-rows", "1,2",
                 "--extend-tokens", "1,2", "--batch-sizes", "1,2", "--context", "8", "--warmup", "0", "--repeats",
                 "1", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    # vLLM drafts the head as a chain: its draft step over one row only; the extends asked for plus those the
    # calibration chains (1/1/2, 4/1/5) reach
    assert [(p["batch_size"], p["tokens"]) for p in doc["mtp_draft_step"]] == [(1, 1), (2, 1)]
    assert [(p["batch_size"], p["tokens"]) for p in doc["mtp_draft_extend"]] == [(b, t) for b in (1, 2)
                                                                                 for t in range(1, 6)]
    # the head's decoder's own work, fitted where it runs (one prompt at a time), no tree for a chain
    assert [o["batch_size"] for o in doc["mtp_overhead"]] == [1] and doc["mtp_overhead"][0]["tree_ms"] == 0
    assert doc["overhead"] == []  # no EAGLE-3 drafter profiled
    assert doc["draft_step"] == [] and doc["draft_extend"] == []
    assert doc["mtp"]["engine"] == doc["deployment"]["engine"] == "vllm"
    assert doc["mtp"]["mtp_layer"] == "model.layers.4" and doc["deployment"]["captured_layers"] is None
    assert doc["model"]["drafter"] == "mtp"
    assert load_profile(out).mtp_draft_extend[0].median_ms == doc["mtp_draft_extend"][0]["median_ms"]


def test_plan_from_a_pair_with_drafter_mtp_points_to_the_measurements(mtp_toy, tmp_path, capsys):
    prompts = write_json(tmp_path / "p.jsonl", {"prompt": "import os"})
    code = main(["plan", "--target", str(mtp_toy.target_dir), "--drafter", "mtp", "--prompts", str(prompts)])
    err = capsys.readouterr().err
    assert code == 2 and "profile --drafter mtp" in err and "probe --drafter mtp" in err and "Traceback" not in err


def test_a_plan_of_the_heads_chains_writes_a_schedule_of_its_steps(tmp_path, capsys):
    """A plan of probe --drafter mtp alone schedules the head's chain lengths (before, "no chain configs")."""
    costs = write_json(tmp_path / "profile.json", mtp_profile())
    probes = [mtp_probe(tmp_path, 1, 1, 2, 1.9, "m1.json"), mtp_probe(tmp_path, 3, 1, 4, 3.2, "m3.json")]
    code = main(["plan", "--costs", str(costs), *[a for p in probes for a in ("--probe", str(p))], "--schedule",
                 "vllm", "--json"])
    captured = capsys.readouterr()
    assert code in (0, None), captured.err
    doc = json.loads(captured.out)
    base = doc["baseline_tokens_per_second"]
    best = {b: max((r for r in doc["configs"] if r["batch_size"] == b), key=lambda r: r["tokens_per_second"])
            for b in (1, 8)}
    steps = {b: best[b]["steps"] if best[b]["tokens_per_second"] > base[str(b)] else 0 for b in (1, 8)}
    assert steps[1] == 3  # the head's 3/1/4 wins at batch 1: a schedule of its steps, not all zeros
    assert doc["schedule"]["num_speculative_tokens_per_batch_size"] == [[1, 7, steps[1]], [8, 8, steps[8]]]
    assert "the target's own MTP head's chain lengths" in doc["schedule_plan"]["notes"][0]
    assert not any("TensorRT-LLM" in n for n in doc["schedule_plan"]["notes"])
    assert main(["plan", "--costs", str(costs), *[a for p in probes for a in ("--probe", str(p))], "--schedule",
                 "trtllm", "--json"]) in (0, None)
    trtllm = json.loads(capsys.readouterr().out)
    assert trtllm["schedule"]["max_draft_len"] == 3
    assert any("its MTP mode is one is not confirmed" in n for n in trtllm["schedule_plan"]["notes"])


def test_a_mixed_plan_schedules_the_drafters_chains_and_names_the_heads_left_out(tmp_path, probe_file):
    from draftlab.cost.schedule import schedule_from_plan

    costs = write_json(tmp_path / "profile.json", mtp_profile())
    probes = load_probes([probe_file, mtp_probe(tmp_path, 3, 1, 4, 4.0)])
    plan = make_plan(load_profile(costs), [p for p in probes if p.method == "eagle3"],
                     mtp=[p for p in probes if p.method == "mtp"])
    assert plan.best[1].method == "mtp"  # the head is faster at batch 1, yet the drafter's schedule is written
    schedule = schedule_from_plan(plan)
    assert schedule.ranges[0].draft_length in (0, 3)
    assert [n for n in schedule.notes if "mtp 3/1/4" in n] == [
        "the MTP head's chains left out (a schedule serves one drafting model): mtp 3/1/4"]


def _overhead(b: int, decode: float, cycle: float, step: float) -> dict:
    return {"batch_size": b, "decode_ms": decode, "cycle_ms": cycle, "draft_step_ms": step, "tree_ms": 0.0}


def test_the_head_is_priced_with_its_own_decoders_overhead_where_it_was_timed(tmp_path, probe_file):
    """The head's decoder does its own per-cycle work (an eager layer of the target's kind, one prompt at a
    time): at batch 1, where profile times its cycles, its rows take that overhead, not the drafter's decoder's
    (before, a real decode of the head ran 20% under the plan, and assess's cross-check withheld the verdict)."""
    doc = mtp_profile()
    doc["overhead"] = [_overhead(1, 0.2, 0.4, 0.1), _overhead(8, 0.3, 0.6, 0.2)]
    doc["mtp_overhead"] = [_overhead(1, 0.25, 2.0, 0.9)]
    probes = load_probes([probe_file, mtp_probe(tmp_path, 3, 1, 4, 3.2)])
    plan = make_plan(profile_from_dict(doc), [p for p in probes if p.method == "eagle3"],
                     mtp=[p for p in probes if p.method == "mtp"])
    rows = {(r.label, r.batch_size): r for r in plan.configs}
    assert rows[("mtp 3/1/4", 1)].overhead_ms == pytest.approx(0.5 + 2.0 + 2 * 0.9)  # the head's own
    assert rows[("mtp 3/1/4", 8)].overhead_ms == pytest.approx(0.5 + 0.6 + 2 * 0.2)  # the drafter's stands in
    assert rows[("3/1/4", 1)].overhead_ms == pytest.approx(0.5 + 0.4 + 2 * 0.1)
    assert plan.decode_ms[1] == pytest.approx(10.0 + 0.2)  # plain decoding: the drafter's decoder's measure
    assert profile_from_dict(json.loads(json.dumps(doc))).mtp_overhead[0].cycle_ms == 2.0


def test_a_profile_of_the_head_alone_takes_plain_decodings_work_from_its_decoder(tmp_path):
    doc = mtp_profile()
    doc["draft_step"], doc["draft_extend"] = [], []
    doc["mtp_overhead"] = [_overhead(1, 0.25, 2.0, 0.9)]
    plan = make_plan(profile_from_dict(doc), [], grid=[], mtp=load_probes([mtp_probe(tmp_path, 3, 1, 4, 3.2)]))
    assert plan.decode_ms == {1: pytest.approx(10.25), 8: pytest.approx(14.0)}  # batch 8: nothing measured
    assert plan.baseline_tokens_per_second[1] == pytest.approx(1000 / 10.25)


def test_profile_shows_both_decoders_overhead_in_the_terminal(tmp_path):
    from rich.console import Console

    from draftlab.report.profile import render_profile

    doc = mtp_profile()
    doc["overhead"] = [_overhead(1, 0.2, 0.4, 0.1)]
    doc["mtp_overhead"] = [_overhead(1, 0.25, 2.0, 0.9)]
    console = Console(record=True, width=120)
    render_profile(profile_from_dict(doc), console, tmp_path / "profile.json")
    lines = console.export_text().splitlines()
    assert any(line.split()[:6] == ["drafter", "1", "0.200", "0.400", "0.100", "0.000"] for line in
               [x.replace("│", " ") for x in lines])
    assert any(line.split()[:7] == ["MTP", "head", "1", "0.250", "2.000", "0.900", "0.000"] for line in
               [x.replace("│", " ") for x in lines])
