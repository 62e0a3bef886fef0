"""``probe --profile-out``: ModelOpt's speculation_profile.json from a probe, its checks, and ``plan --profile``."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "cost"))

from cost_fixtures import profile_doc, write_json  # noqa: E402

from draftlab.acceptance.profile import (  # noqa: E402
    AcceptanceProfile,
    accept_length_for,
    rates_from_histogram,
    read_profile,
    validation,
    write_profile,
)
from draftlab.cli import main  # noqa: E402
from draftlab.errors import DraftlabError  # noqa: E402

TEXTS = [("def __init__(self, ", "code"), ("import os\nimport sys\n\n", "code"),
         ("    for i in range(len(", "loops"), ("The quick brown fox", None)]

# ModelOpt's minimal example (engine-interop.md 5d: build_profile on the histogram {1: 40, 2: 30, 3: 30}, K = 3)
MODELOPT_EXAMPLE = {
    "schema_version": "1.0", "measured": True, "method": "eagle3", "draft_checkpoint": None, "target_model": None,
    "num_speculative_tokens": 3, "block_size": None, "max_supported_k": 3, "verification_method": "longest_prefix",
    "conditional_accept_rates": [0.6, 0.5, 0.0], "marginal_accept_rates": [0.6, 0.3, 0.0],
    "mean_accept_length": 1.9, "mean_accept_length_per_request": 1.9, "accept_length_model": "chain_analytic",
    "accept_length_by_k": {"3": 1.9}, "acceptance_length_histogram": {"1": 40, "2": 30, "3": 30},
    "per_category": None, "measurement_conditions": {"dataset": "speed_bench/coding", "temperature": 0.0},
    "validation": {"mean_consistency": {"implied_mean_accept_length": 1.9, "reported_mean_accept_length": 1.9,
                                        "abs_delta": 0.0, "tolerance": 0.02, "passed": True},
                   "marginal_monotonicity": {"passed": True, "violations": []}},
}


def test_derivation_matches_modelopts_example(tmp_path):
    marginal, conditional = rates_from_histogram([0, 40, 30, 30], 3)
    assert marginal == [0.6, 0.3, 0.0] and conditional == [0.6, 0.5, 0.0]
    assert validation(marginal, 1.9)["mean_consistency"]["passed"]
    got = read_profile(write_json(tmp_path / "speculation_profile.json", MODELOPT_EXAMPLE))
    assert got.marginal_accept_rates == [0.6, 0.3, 0.0] and got.is_chain
    # a chain profile without draftlab's speculation_config: K from accept_length_by_k, shorter chains derived
    assert accept_length_for(got, 3, 1, 4) == (1.9, "accept_length_by_k[3]")
    assert accept_length_for(got, 1, 1, 2)[0] == pytest.approx(1.6)


@pytest.mark.parametrize("change, words", [
    ({"marginal_accept_rates": [0.6, 0.7, 0.0], "conditional_accept_rates": [0.6, 1.0, 0.0],
      "mean_accept_length": 2.3}, "must be non-increasing"),
    ({"mean_accept_length": 1.95}, "differs from 1 + sum(marginal_accept_rates)"),
    ({"marginal_accept_rates": [0.6, 0.3]}, "has 2 entries but num_speculative_tokens is 3"),
    ({"marginal_accept_rates": [1.2, 0.3, 0.0]}, "not a finite probability"),
    ({"conditional_accept_rates": [0.6, float("nan"), 0.0]}, "not a finite probability"),
    ({"marginal_accept_rates": [None, 0.3, 0.0]}, "holds None, not a finite probability"),
    ({"mean_accept_length": 5.0}, "between 1 and K + 1"),
    ({"measured": False}, "measured is false"),
    ({"schema_version": "2.0"}, "schema_version '2.0'"),
    ({"marginal_accept_rates": None, "vectors_unavailable_reason": "block verification is not longest-prefix"},
     "no marginal_accept_rates (block verification"),
    ({"speculation_config": {"steps": 2, "topk": 1, "num_draft_tokens": 3}}, "speculation_config must hold"),
])
def test_a_profile_failing_a_check_is_refused_on_read(tmp_path, change, words):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**MODELOPT_EXAMPLE, **change}))
    with pytest.raises(DraftlabError) as err:
        read_profile(path)
    assert words in str(err.value) and str(err.value).startswith(str(path))


def test_missing_schema_version_and_cli_refusal_is_one_line(tmp_path, capsys):
    costs = write_json(tmp_path / "costs.json", profile_doc())
    bad = write_json(tmp_path / "bad.json", {k: v for k, v in MODELOPT_EXAMPLE.items() if k != "schema_version"})
    assert main(["plan", "--costs", str(costs), "--profile", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a speculation profile (no schema_version)" in err


def test_a_bad_profile_is_refused_on_write_and_nothing_is_written(tmp_path):
    bad = AcceptanceProfile(num_speculative_tokens=2, conditional_accept_rates=[0.5, 0.5],
                            marginal_accept_rates=[0.5, 0.25], mean_accept_length=1.9)
    out = tmp_path / "p.json"
    with pytest.raises(DraftlabError, match="differs from 1 \\+ sum"):
        write_profile(bad, out)
    assert list(tmp_path.iterdir()) == []


def test_mapping_onto_other_configs():
    chain = AcceptanceProfile(num_speculative_tokens=3, conditional_accept_rates=[0.8, 0.75, 0.5],
                              marginal_accept_rates=[0.8, 0.6, 0.3], mean_accept_length=2.7,
                              speculation_config={"steps": 3, "topk": 1, "num_draft_tokens": 4})
    assert accept_length_for(chain, 3, 1, 4) == (2.7, "measured")
    assert accept_length_for(chain, 2, 1, 3) == (pytest.approx(2.4), "1 + first 2 marginals, an estimate")
    with pytest.raises(DraftlabError, match="measured 3 draft positions; 4/1/5 needs 4"):
        accept_length_for(chain, 4, 1, 5)
    with pytest.raises(DraftlabError, match="cannot give the tree 3/4/8"):
        accept_length_for(chain, 3, 4, 8)
    tree = AcceptanceProfile(**{**chain.__dict__, "speculation_config": {"steps": 3, "topk": 4, "num_draft_tokens": 8}})
    assert accept_length_for(tree, 3, 4, 8)[0] == 2.7
    with pytest.raises(DraftlabError, match="measured on the tree 3/4/8"):
        accept_length_for(tree, 2, 1, 3)


@pytest.fixture(scope="module")
def probed(toy_pair, tmp_path_factory):
    """``probe --json --profile-out`` on the toy pair (3/1/4), prompts with categories: (probe doc, profile doc, dir)."""
    folder = tmp_path_factory.mktemp("profile")
    rows = [{"input_ids": list(t.encode()), **({"category": c} if c else {})} for t, c in TEXTS]
    prompts = folder / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = folder / "speculation_profile.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["probe", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                     "--prompts", str(prompts), "--steps", "3", "--topk", "1", "--num-draft-tokens", "4",
                     "--max-new-tokens", "40", "--json", "--profile-out", str(out)])
    assert code == 0
    probe_doc = json.loads(buf.getvalue())
    (folder / "probe.json").write_text(json.dumps(probe_doc))
    return probe_doc, json.loads(out.read_text()), folder


def test_profile_holds_the_probes_figures_per_position_and_category(probed):
    probe_doc, prof, _ = probed
    lengths = [n for r in probe_doc["results"] for n in r["accept_lengths"]]
    assert 1.5 < probe_doc["mean_accept_length"] < 4 and len(set(lengths)) > 2  # acceptance is real and varies
    assert prof["schema_version"] == "1.0" and prof["num_speculative_tokens"] == 3
    assert prof["mean_accept_length"] == probe_doc["mean_accept_length"]
    survival = [sum(n >= i + 2 for n in lengths) / len(lengths) for i in range(3)]
    assert prof["marginal_accept_rates"] == [round(s, 6) for s in survival]
    # conditional = the probe's acceptance_by_step (P(draft j accepted | drafts before accepted))
    assert prof["conditional_accept_rates"] == pytest.approx([p or 0.0 for p in probe_doc["acceptance_by_step"]],
                                                             abs=1e-6)
    assert prof["acceptance_length_histogram"] == {str(k): v for k, v in Counter(lengths).items()} | {
        str(k): 0 for k in range(1, 5) if k not in lengths}
    assert prof["validation"]["mean_consistency"]["passed"] and prof["validation"]["marginal_monotonicity"]["passed"]
    assert prof["speculation_config"] == {"steps": 3, "topk": 1, "num_draft_tokens": 4}
    conditions = prof["measurement_conditions"]
    assert conditions["temperature"] == 0.0 and conditions["prompts"].endswith("prompts.jsonl")
    assert conditions["drafter"] and conditions["target"] and conditions["steps"] == 3
    cats = prof["per_category"]
    assert sorted(cats) == ["code", "loops"]  # the prompt without a category is in neither
    code = [n for r in probe_doc["results"][:2] for n in r["accept_lengths"]]
    assert cats["code"]["num_prompts"] == 2 and cats["code"]["num_cycles"] == len(code)
    assert cats["code"]["mean_accept_length"] == pytest.approx(sum(code) / len(code))
    assert cats["code"]["marginal_accept_rates"] == [round(sum(n >= i + 2 for n in code) / len(code), 6)
                                                     for i in range(3)]


def test_profile_round_trips_through_plan_with_the_probes_predictions(probed, tmp_path, capsys):
    _, _, folder = probed
    costs = write_json(tmp_path / "costs.json", profile_doc())

    def plan(*args):
        assert main(["plan", "--costs", str(costs), *args, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    from_probe = plan("--probe", str(folder / "probe.json"))
    from_profile = plan("--profile", str(folder / "speculation_profile.json"))
    strip = lambda doc: [{k: v for k, v in c.items() if k != "accept_length_source"} for c in doc["configs"]]  # noqa: E731
    assert strip(from_profile) == strip(from_probe) and len(from_probe["configs"]) == 2  # batch sizes 1 and 8
    assert from_profile["verdict"] == from_probe["verdict"]

    shorter = plan("--profile", str(folder / "speculation_profile.json"), "--grid", "1/1/2,2/1/3,3/1/4",
                   "--batch-sizes", "1")
    m = json.loads((folder / "speculation_profile.json").read_text())["marginal_accept_rates"]
    got = {c["steps"]: c["accept_length"] for c in shorter["configs"]}
    assert got[1] == pytest.approx(1 + m[0]) and got[2] == pytest.approx(1 + m[0] + m[1])
    assert got[3] == from_probe["configs"][0]["accept_length"]
    assert main(["plan", "--costs", str(costs), "--profile", str(folder / "speculation_profile.json"),
                 "--grid", "4/1/5"]) == 2
    assert "needs 4; probe 4/1/5" in capsys.readouterr().err


def _result(histogram, *, topk=1, estimate=False, per_prompt=((2, 3), (1,))):
    from draftlab.probe.probe import ProbePromptResult, ProbeResult

    steps = len(histogram) - 2
    mean = sum(i * n for i, n in enumerate(histogram)) / (sum(histogram) or 1)
    results = [ProbePromptResult(i, [] if estimate else list(a), 0 if estimate else len(a), 8, 0.0,
                                 mean if estimate else None) for i, a in enumerate(per_prompt)]
    return ProbeResult(config={"steps": steps, "topk": topk, "num_draft_tokens": 8 if topk > 1 else steps + 1,
                               "temperature": 0.5 if estimate else 0.0},
                       mean_accept_length=mean, acceptance_by_step=[], accept_length_histogram=list(histogram),
                       per_position_accept_length=mean, vocab_bound=1.0, target_disagreement=None, skipped_prompts=0,
                       results=results, estimate=estimate)


def test_a_trees_profile_is_measured_per_k_and_an_estimates_keeps_its_shares():
    from draftlab.probe.to_profile import profile_from_probe

    tree = profile_from_probe(_result([0, 1, 1, 1], topk=4), categories=["a", "b"])
    assert tree.accept_length_model == "measured_per_k" and tree.accept_length_by_k == {} and not tree.is_chain
    assert tree.marginal_accept_rates == [round(2 / 3, 6), round(1 / 3, 6)]
    assert tree.per_category["a"]["mean_accept_length"] == 2.5 and tree.per_category["b"]["num_cycles"] == 1
    shares = profile_from_probe(_result([0.0, 0.25, 0.5, 0.25], estimate=True), categories=["a", None])
    assert shares.acceptance_length_histogram == {"1": 0.25, "2": 0.5, "3": 0.25}
    assert shares.marginal_accept_rates == [0.75, 0.25] and shares.measurement_conditions["estimate"] is True
    assert list(shares.per_category) == ["a"] and shares.per_category["a"]["mean_accept_length"] == 2.0
    with pytest.raises(DraftlabError, match="measured no verify cycle"):
        profile_from_probe(_result([0, 0, 0, 0], per_prompt=()))


def test_categories_are_read_without_a_tokenizer_in_read_prompts_order(tmp_path):
    from draftlab.decode.prompts import read_categories, read_prompts

    path = tmp_path / "p.jsonl"
    path.write_text('{"input_ids": [1], "category": "code"}\n\n{"input_ids": [2]}\n{"input_ids": [3], "category": "c"}\n')
    assert read_categories(path) == [r.category for r in read_prompts(path, tokenizer_dir=tmp_path, vocab_size=8)]
    assert read_categories(path) == ["code", None, "c"]
    path.write_text('{"prompt": "needs a tokenizer", "category": 3}\n')
    with pytest.raises(DraftlabError, match="p.jsonl:1: category must be a string"):
        read_categories(path)
