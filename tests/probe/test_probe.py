"""The probe against the reference decoder on the trained toy pair: identical accept lengths."""

import json

import pytest

from draftlab.cli import main
from draftlab.decode.generate import generate
from draftlab.errors import DraftlabError
from draftlab.probe.probe import probe

TEXTS = ["def __init__(self, ", "import os\nimport sys\n\n", "    for i in range(len("]
NEW = 32


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("p") / "prompts.jsonl", [{"input_ids": list(t.encode())} for t in TEXTS])


@pytest.mark.parametrize("cfg", [(3, 1, 4), (2, 2, 4), (4, 4, 8)])
def test_probe_equals_generate_per_prompt(toy_pair, prompts, cfg):
    s, k, n = cfg
    ref = generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=s, topk=k, num_draft_tokens=n,
                   max_new_tokens=NEW)
    got = probe(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=s, topk=k, num_draft_tokens=n,
                max_new_tokens=NEW, batch_size=2)
    assert [r.accept_lengths for r in got.results] == [r.accept_lengths for r in ref.results]
    assert got.mean_accept_length == ref.mean_accept_length
    lengths = [x for r in ref.results for x in r.accept_lengths]
    assert 1.5 < ref.mean_accept_length < s + 1 and len(set(lengths)) > 1  # acceptance is real and varies
    assert got.target_disagreement == 0.0
    assert sum(got.accept_length_histogram) == len(lengths) and got.accept_length_histogram[0] == 0
    assert len(got.acceptance_by_step) == s and all(p is None or 0 <= p <= 1 for p in got.acceptance_by_step)


def test_given_responses_reproduce_generate_and_report_off_greedy_text(toy_pair, prompts, tmp_path):
    s, k, n = 2, 2, 4
    ahead = generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=s, topk=k, num_draft_tokens=n,
                     max_new_tokens=NEW + s + 1)
    rows = [{"input_ids": list(t.encode()), "response_ids": r.output_ids} for t, r in zip(TEXTS, ahead.results)]
    given = _write(tmp_path / "given.jsonl", rows)
    ref = generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=s, topk=k, num_draft_tokens=n,
                   max_new_tokens=NEW)
    got = probe(toy_pair.target_dir, toy_pair.drafter_dir, given, steps=s, topk=k, num_draft_tokens=n,
                max_new_tokens=NEW, responses="given")
    assert [r.accept_lengths for r in got.results] == [r.accept_lengths for r in ref.results]
    assert got.target_disagreement == 0.0

    shuffled = [{**row, "response_ids": row["response_ids"][::-1]} for row in rows]
    off = probe(toy_pair.target_dir, toy_pair.drafter_dir, _write(tmp_path / "off.jsonl", shuffled), steps=s,
                topk=k, num_draft_tokens=n, max_new_tokens=NEW, responses="given")
    assert off.target_disagreement > 0.3
    assert off.mean_accept_length < got.mean_accept_length


def test_cli_json_contract_and_prompt_too_long(toy_pair, prompts, tmp_path, capsys):
    rows = [{"input_ids": list(t.encode())} for t in TEXTS] + [{"input_ids": [65] * 2048}]
    path = _write(tmp_path / "long.jsonl", rows)
    code = main(["probe", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                 "--prompts", str(path), "--steps", "3", "--topk", "1", "--num-draft-tokens", "4",
                 "--max-new-tokens", "16", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("config", "mean_accept_length", "results", "acceptance_by_step", "accept_length_histogram",
                "per_position_accept_length", "vocab_bound"):
        assert key in doc
    assert [r["prompt_index"] for r in doc["results"]] == [0, 1, 2]
    assert doc["skipped_prompts"] == 1
    assert all(r["num_cycles"] == len(r["accept_lengths"]) for r in doc["results"])
    assert 0 < doc["vocab_bound"] <= 1 and doc["per_position_accept_length"] >= 1


def test_bad_inputs_are_one_line_errors(toy_pair, prompts, capsys):
    base = ["probe", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
            "--prompts", str(prompts)]
    assert main(base + ["--responses", "given"]) == 2
    assert "response_ids" in capsys.readouterr().err
    assert main(base + ["--steps", "3", "--topk", "1", "--num-draft-tokens", "8"]) == 2
    assert "--num-draft-tokens 4" in capsys.readouterr().err
    with pytest.raises(DraftlabError, match="prompts file not found"):
        probe(toy_pair.target_dir, toy_pair.drafter_dir, prompts.parent / "missing.jsonl")
