"""``draftlab plan`` end to end, in-process: JSON on stdout, one-line errors with exit code 2."""

from __future__ import annotations

import json

import pytest
from cost_fixtures import profile_doc, write_json

from draftlab.cli import main


def run_json(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_engine_numbers_json(capsys):
    doc = run_json(capsys, ["plan", "--baseline-tps", "82", "--spec-tps", "52",
                            "--accept-length", "1.5", "--json"])
    assert round(doc["decode_ms"], 1) == 12.2
    assert round(doc["cycle_ms"], 1) == 28.8
    assert round(doc["break_even_accept_length"], 2) == 2.37
    assert doc["what_ifs"] == []


def test_engine_what_ifs_json(capsys):
    doc = run_json(capsys, ["plan", "--baseline-tps", "82", "--spec-tps", "52",
                            "--accept-length", "1.5", "--allreduce-ms", "25",
                            "--what-if", "allreduce_scale=0.5", "--what-if", "cycle_ms=14.5",
                            "--json"])
    halved, fast = doc["what_ifs"]
    assert halved["assumptions"] == {"allreduce_scale": 0.5}
    assert halved["tokens_per_second"] == pytest.approx(1500 / (1500 / 52 - 12.5))
    assert fast["tokens_per_second"] == pytest.approx(1500 / 14.5)
    assert "If allreduce_scale=0.5" in doc["verdict"]


def test_costs_json_and_plot(capsys, tmp_path, profile_file, probe_file):
    png = tmp_path / "out" / "plan.png"
    doc = run_json(capsys, ["plan", "--costs", str(profile_file), "--probe", str(probe_file),
                            "--grid", "3/1/4,2/4/6:2.2", "--plot", str(png), "--json"])
    assert doc["baseline_tokens_per_second"]["1"] == pytest.approx(100.0)
    assert len(doc["configs"]) == 4
    assert doc["best"]["1"]["tokens_per_second"] == pytest.approx(2500 / 16.8)
    assert doc["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_costs_table(capsys, profile_file, probe_file):
    assert main(["plan", "--costs", str(profile_file), "--probe", str(probe_file)]) == 0
    out = capsys.readouterr().out
    assert "3/1/4 *" in out and "Speculation loses at batch 8" in out


@pytest.mark.parametrize("extra, words", [
    (["--grid", "3/1/4,5/4/8"], "5/4/8 at batch size 1 has no probe result"),
    (["--batch-sizes", "32"], "batch size 32 was not profiled"),
    (["--spec-tps", "52"], "drop --spec-tps"),
])
def test_costs_bad_input_exit_2(capsys, profile_file, probe_file, extra, words):
    code = main(["plan", "--costs", str(profile_file), "--probe", str(probe_file), "--json",
                 *extra])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert out.err.startswith("draftlab: error:") and words in out.err
    assert out.err.count("\n") == 1


def test_zero_time_in_profile_exit_2(capsys, tmp_path, probe_file):
    doc = profile_doc()
    doc["draft_step"][0]["median_ms"] = 0
    path = write_json(tmp_path / "p.json", doc)
    assert main(["plan", "--costs", str(path), "--probe", str(probe_file)]) == 2
    assert "draft_step[0].median_ms is 0" in capsys.readouterr().err


def test_engine_bad_input_exit_2(capsys):
    assert main(["plan", "--baseline-tps", "82", "--spec-tps", "52", "--json"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "--accept-length" in out.err


def test_schedule_json_and_file(capsys, tmp_path, profile_file, probe_file):
    """3/1/4 wins at batch 1, 1/1/2 at batch 8 (see test_plan's hand computation): vLLM's ranges say so,
    and the file holds exactly the JSON key ``schedule``."""
    out = tmp_path / "sched" / "vllm.json"
    doc = run_json(capsys, ["plan", "--costs", str(profile_file), "--probe", str(probe_file), "--grid",
                            "3/1/4,1/1/2:1.8,2/4/6:2.2", "--schedule", "vllm", "--engine-version", "0.24.0",
                            "--schedule-out", str(out), "--schedule-max-batch", "32", "--json"])
    assert doc["schedule"] == {"num_speculative_tokens": 3,
                               "num_speculative_tokens_per_batch_size": [[1, 7, 3], [8, 32, 1]]}
    assert json.loads(out.read_text()) == doc["schedule"]
    assert doc["schedule_plan"]["version"] == "0.24.0"
    assert [r["planned_batch"] for r in doc["schedule_plan"]["planned"]["ranges"]] == [1, 8]
    assert doc["best"]["8"]["steps"] == 1


def test_schedule_table(capsys, profile_file, probe_file):
    assert main(["plan", "--costs", str(profile_file), "--probe", str(probe_file), "--schedule", "sglang"]) == 0
    out = capsys.readouterr().out
    assert "Draft length per batch size for SGLang" in out
    assert 'sglang: {"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [0]}}' in out


@pytest.mark.parametrize("argv, words", [
    (["--schedule", "vllm", "--engine-version", "0.23.0"], "vLLM 0.23.0 takes no per-batch-size draft length"),
    (["--schedule", "sglang", "--engine-version", "0.5.13"], "steps 0 needs SGLang 0.5.14+"),
    (["--engine-version", "0.24.0"], "--engine-version goes with --schedule"),
    (["--schedule-out", "x.json"], "--schedule-out goes with --schedule"),
])
def test_schedule_bad_input_exit_2(capsys, profile_file, probe_file, argv, words):
    assert main(["plan", "--costs", str(profile_file), "--probe", str(probe_file), *argv]) == 2
    out = capsys.readouterr()
    assert out.out == "" and words in out.err and out.err.count("\n") == 1


def test_schedule_refused_with_engine_numbers(capsys):
    assert main(["plan", "--baseline-tps", "82", "--spec-tps", "52", "--accept-length", "1.5",
                 "--schedule", "vllm"]) == 2
    assert "engine numbers describe one config at one batch size" in capsys.readouterr().err
