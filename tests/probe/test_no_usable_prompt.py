"""A probe (or a drift that probes) with no prompt shorter than the target's context measured nothing:
it exits 2 saying why, instead of a mean accept length of 0.0 that reads as a drafter accepting
nothing. Some prompts skipped: the run goes on, counts them, and the report's heading says so."""

from __future__ import annotations

import json

from draftlab.cli import main
from draftlab.report.html.report import make_report

FLAGS = ["--steps", "3", "--topk", "1", "--num-draft-tokens", "4", "--max-new-tokens", "8"]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_every_prompt_too_long_is_exit_2_naming_the_context(toy_pair, tmp_path, capsys):
    long = _write(tmp_path / "long.jsonl", [{"input_ids": [65] * 2048}, {"input_ids": [66] * 3000}])
    code = main(["probe", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                 "--prompts", str(long), *FLAGS, "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(long) in err
    assert "every prompt (2)" in err and "context (2048 tokens)" in err and "Traceback" not in err


def test_drift_with_a_drafter_refuses_before_loading_a_model(toy_pair, tmp_path, capsys, monkeypatch):
    long = _write(tmp_path / "long.jsonl", [{"input_ids": [65] * 2048}])

    def no_load(*a, **k):
        raise AssertionError("a model was loaded for prompts that cannot be probed")

    monkeypatch.setattr("draftlab.models.target.TargetRunner.load", no_load)
    t = str(toy_pair.target_dir)
    code = main(["drift", "--target-a", t, "--target-b", t, "--prompts", str(long), "--drafter",
                 str(toy_pair.drafter_dir), *FLAGS])
    err = capsys.readouterr().err
    assert code == 2 and "every prompt (1)" in err and "context (2048 tokens)" in err


def test_some_prompts_skipped_are_counted_and_the_report_heading_says_so(toy_pair, tmp_path, capsys):
    rows = [{"input_ids": list(b"def f(x):\n")}, {"input_ids": [65] * 2048}, {"input_ids": list(b"import os\n")}]
    code = main(["probe", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                 "--prompts", str(_write(tmp_path / "p.jsonl", rows)), *FLAGS, "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["skipped_prompts"] == 1 and [r["prompt_index"] for r in doc["results"]] == [0, 2]
    (tmp_path / "probe.json").write_text(json.dumps(doc))
    heading = make_report([tmp_path / "probe.json"], tmp_path / "r.html").sections[0]["heading"]
    assert "on 2 of 3 prompts" in heading and "1 skipped" in heading


def test_a_stored_probe_that_measured_nothing_is_not_headlined_as_zero(toy_pair, tmp_path, capsys):
    rows = [{"input_ids": list(b"def f(x):\n")}]
    assert main(["probe", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                 "--prompts", str(_write(tmp_path / "p.jsonl", rows)), *FLAGS, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    doc.update(mean_accept_length=0.0, results=[], skipped_prompts=1)  # as older draftlab wrote them
    (tmp_path / "old.json").write_text(json.dumps(doc))
    heading = make_report([tmp_path / "old.json"], tmp_path / "r.html").sections[0]["heading"]
    assert "accepts 0.00" not in heading and "nothing measured" in heading


def test_a_prompt_near_the_context_is_probed_up_to_it_as_generate_decodes_it(toy_pair, tmp_path, capsys):
    """2040 of 2048 tokens leave room for 8, fewer than max_new_tokens + steps (11): the probe still runs (it
    used to fail on the position past the context), that prompt's cycles stop where generate's do, and the
    other prompt, decoded in the same batch, is untouched."""
    rows = [{"input_ids": [65] * 2040}, {"input_ids": list(b"import os\nimport sys\n")}]
    prompts = _write(tmp_path / "p.jsonl", rows)
    pair = ["--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir), "--prompts", str(prompts)]
    assert main(["probe", *pair, *FLAGS, "--json"]) == 0
    probed = json.loads(capsys.readouterr().out)
    assert main(["generate", *pair, *FLAGS, "--json"]) == 0
    generated = json.loads(capsys.readouterr().out)
    assert [r["accept_lengths"] for r in probed["results"]] == [r["accept_lengths"] for r in generated["results"]]
    near = generated["results"][0]
    assert 0 < len(near["output_ids"]) <= 8 and sum(probed["results"][0]["accept_lengths"]) <= 8
    assert sum(near["accept_lengths"]) > len(near["accept_lengths"])  # the drafter accepted something there
