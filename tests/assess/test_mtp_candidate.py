"""``assess`` on a toy target that ships an MTP head and has an EAGLE-3 drafter: the head is a candidate beside
the drafter and the model-free methods, probed on the same continuations (equal to ``probe --drafter mtp``),
priced by its own passes, and one comparison names the better of the two with both accept lengths and
predicted speeds. vLLM, which drafts the head as a chain: the grid's tree is the drafter's alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from costs import noisy_profile, toy_profile
from test_assess import TEXTS, run

from draftlab.toy.mtp_drafter import cached_mtp_eagle3_drafter

GRID = "3/1/4,6/1/7,5/4/8"


@pytest.fixture(scope="session")
def mtp_inputs(mtp_toy, tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("assess-mtp")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t, "category": c}) + "\n" for t, c in TEXTS))
    return {"tmp": tmp, "target": mtp_toy.target_dir, "drafter": cached_mtp_eagle3_drafter(mtp_toy.target_dir),
            "prompts": prompts, "costs": toy_profile(tmp / "costs.json", mtp_ms=1.5)}


def assess_mtp(i: dict[str, Path], name: str, costs: Path, *extra: str) -> dict:
    code, doc, err = run(["assess", "--drafter", str(i["drafter"]), "--target", str(i["target"]), "--prompts",
                          str(i["prompts"]), "--costs", str(costs), "--batch-sizes", "1,8", "--grid", GRID,
                          "--engine", "vllm", "--max-new-tokens", "20", "--out", str(i["tmp"] / name), *extra,
                          "--json"])
    assert code == 0, err
    return doc


@pytest.fixture(scope="session")
def both(mtp_inputs) -> dict:
    return assess_mtp(mtp_inputs, "both", mtp_inputs["costs"])


def test_one_verdict_names_the_better_candidate_with_both_accept_lengths_and_speeds(both):
    versus = both["verdict"]["versus"]
    b = versus["batch_size"]
    assert b == 1
    rows = [r for r in both["plan"]["configs"] if r["batch_size"] == b]
    drafter = max((r for r in rows if r["method"] == "eagle3"), key=lambda r: r["tokens_per_second"])
    head = max((r for r in rows if r["method"] == "mtp"), key=lambda r: r["tokens_per_second"])
    assert versus["better"] == ("mtp" if head["tokens_per_second"] > drafter["tokens_per_second"] else "drafter")
    probes = {p["config"]["steps"]: p["mean_accept_length"] for p in both["probes"]}
    heads = {p["config"]["steps"]: p["mean_accept_length"] for p in both["mtp_probes"]}
    assert versus["drafter"]["accept_length"] == probes[drafter["steps"]] == drafter["accept_length"]
    assert versus["mtp"]["accept_length"] == heads[head["steps"]] == head["accept_length"]
    assert (versus["drafter"]["tokens_per_second"], versus["mtp"]["tokens_per_second"]) == \
        (drafter["tokens_per_second"], head["tokens_per_second"])
    text = versus["text"]
    for figure in (drafter["accept_length"], head["accept_length"], drafter["tokens_per_second"],
                   head["tokens_per_second"]):
        assert (f"{figure:.2f}" if figure < 10 else f"{figure:.1f}") in text
    assert text.startswith("The target's own MTP head" if versus["better"] == "mtp" else "The EAGLE-3 drafter")
    # both accept: the comparison is between two drafting models that each win cycles
    assert drafter["accept_length"] > 1.3 and head["accept_length"] > 1.3
    # the headline still answers about the drafter
    assert both["verdict"]["kind"] in ("serve", "speculation-off") and "mtp" not in both["verdict"]["headline"]


def test_the_head_is_probed_on_the_same_prompts_as_probe_drafter_mtp_gives(both, mtp_inputs):
    i = mtp_inputs
    assert [p["config"]["steps"] for p in both["mtp_probes"]] == [3, 6]  # vLLM drafts the head as a chain
    assert both["mtp"]["source"] == "models/deepseek_mtp.py" and both["mtp"]["mtp_layer"] == "model.layers.4"
    for mine in both["mtp_probes"]:
        c = mine["config"]
        code, alone, err = run(["probe", "--target", str(i["target"]), "--drafter", "mtp", "--engine", "vllm",
                                "--prompts", str(i["prompts"]), "--steps", str(c["steps"]), "--topk", "1",
                                "--num-draft-tokens", str(c["num_draft_tokens"]), "--max-new-tokens", "20",
                                "--json"])
        assert code == 0, err
        assert mine["mean_accept_length"] == alone["mean_accept_length"]
        assert [r["accept_lengths"] for r in mine["results"]] == [r["accept_lengths"] for r in alone["results"]]
        assert (c["drafter_kind"], c["engine"]) == ("mtp", "vllm")
    assert {"mtp 3/1/4", "mtp 6/1/7"} <= set(both["slices"])


def test_the_serving_part_runs_the_fastest_method_mtp_among_them(both):
    per_batch = both["verdict"]["serving"]["per_batch"]
    for b, chosen in per_batch.items():
        rows = [r for r in both["plan"]["configs"] if r["batch_size"] == int(b)]
        fastest = max(rows, key=lambda r: r["tokens_per_second"])
        label = {"mtp": f"mtp {fastest['steps']}/{fastest['topk']}/{fastest['num_draft_tokens']}",
                 "eagle3": f"{fastest['steps']}/{fastest['topk']}/{fastest['num_draft_tokens']}"}.get(
            fastest["method"], f"{fastest['method']} k={fastest['steps']}")
        assert chosen == (label if fastest["speedup"] > 1 else "off")
    assert any(v.startswith("mtp ") for v in per_batch.values())  # on this toy the head wins somewhere
    assert both["verdict"]["serving"]["model_free_note"] is None  # the head's win is no model-free one


def test_contradicting_timings_compare_accept_lengths_only(mtp_inputs):
    i = mtp_inputs
    versus = assess_mtp(i, "noisy", noisy_profile(i["costs"], i["tmp"] / "noisy.json"))["verdict"]["versus"]
    assert versus["better"] is None and "no speed verdict" in versus["text"]
    assert "tokens_per_second" not in versus["drafter"] and "tok/s" not in versus["text"]
    assert versus["mtp"]["accept_length"] > 1


def test_costs_without_the_heads_passes_probe_it_and_say_why_it_is_not_priced(mtp_inputs):
    i = mtp_inputs
    doc = assess_mtp(i, "unpriced", toy_profile(i["tmp"] / "no-mtp.json"))
    assert doc["mtp_probes"] and doc["verdict"]["versus"] is None
    assert "profile --drafter mtp" in doc["mtp_note"]
    assert all(r["method"] != "mtp" for r in doc["plan"]["configs"])


def test_measured_here_the_profile_holds_the_heads_own_passes(mtp_inputs):
    """No --costs: the head's draft step and extend are timed beside the pair's passes and name the engine."""
    from draftlab.assess.run import assess
    from draftlab.cost.model import SpecConfig
    from draftlab.cost.profile import CostTable

    i = mtp_inputs
    result = assess(i["drafter"], i["target"], i["prompts"], i["tmp"] / "measured", engine="vllm",
                    grid=[SpecConfig(3, 1, 4)], batch_sizes=[1], repeats=1, max_new_tokens=20, model_free=[],
                    progress=False)
    profile = result.profile
    assert (1, 1) in [(m.batch_size, m.tokens) for m in profile.mtp_draft_step]
    assert {m.tokens for m in profile.mtp_draft_extend} >= {1, 2, 3, 4}
    assert profile.deployment["captured_layers"] == [0, 1, 2] and profile.mtp["mtp_layer"] == "model.layers.4"
    head = next(r for r in result.plan.configs if r.method == "mtp")
    assert head.draft_steps_ms == pytest.approx(2 * CostTable.of(profile, mtp=True).draft_step.at(1, 1))  # the head's
    assert result.verdict.versus is not None and result.verdict.versus.mtp["config"] == "mtp 3/1/4"
    # the plan held against a real decode of each: the drafter's config and the head's
    assert [c["what"].split(",")[0] for c in result.measured_checks] == ["a real decode of 3/1/4 here",
                                                                          "a real decode of mtp 3/1/4 here"]


def test_assess_drafter_mtp_says_the_head_is_a_candidate_beside_a_drafter(mtp_inputs, tmp_path):
    i = mtp_inputs
    code, _, err = run(["assess", "--drafter", "mtp", "--target", str(i["target"]), "--prompts", str(i["prompts"]),
                        "--out", str(tmp_path / "out")])
    assert code == 2 and "joins it as a candidate" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_head_config_the_given_costs_cannot_price_is_probed_and_named(mtp_inputs, both):
    i = mtp_inputs
    doc = json.loads(i["costs"].read_text())
    doc["mtp_draft_extend"] = [p for p in doc["mtp_draft_extend"] if p["tokens"] <= 3]
    short = i["tmp"] / "short.json"
    short.write_text(json.dumps(doc))
    heads = {p["config"]["steps"]: p["mean_accept_length"] for p in both["mtp_probes"]}
    assert heads[3] <= 3 < heads[6]  # 6/1/7's extend reaches past the 3 tokens measured
    got = assess_mtp(i, "short", short)
    assert {r["steps"] for r in got["plan"]["configs"] if r["method"] == "mtp"} == {3}
    assert got["mtp_note"].startswith("mtp 6/1/7 probed but not priced") and got["verdict"]["versus"] is not None


def test_engine_numbers_leave_the_head_probed_and_say_so(mtp_inputs):
    i = mtp_inputs
    code, doc, err = run(["assess", "--drafter", str(i["drafter"]), "--target", str(i["target"]), "--prompts",
                          str(i["prompts"]), "--grid", "3/1/4", "--engine", "vllm", "--max-new-tokens", "20",
                          "--baseline-tps", "100", "--spec-tps", "150", "--accept-length", "2.0",
                          "--out", str(i["tmp"] / "engine"), "--json"])
    assert code == 0, err
    assert doc["mtp_probes"] and doc["verdict"]["versus"] is None and "not priced" in doc["mtp_note"]
