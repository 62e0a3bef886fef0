"""Issue 42's bad inputs, each through the CLI: a lone surrogate in prompt text (valid JSON, no character)
in every command that reads prompts, a non-UTF-8 byte in bench's prompts, outputs named by symlinks, a
dangling symlink as an output folder. Each is one line and exit 2, no traceback, inputs' bytes unchanged,
and no link replaced. And ``plan --schedule`` where speculation always loses is a result (exit 0)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from draftlab.cli import main

SRC = str(Path(__file__).parents[2] / "src")
SURROGATE_ROWS = {  # valid JSON: "\ud800" parses to a lone surrogate
    "prompt": '{"prompt": "def f(x):\\ud800 return"}\n',
    "messages": '{"messages": [{"role": "user", "content": "hi \\udc00"}]}\n',
}
TRAIN_ROWS = {
    "text": '{"text": "def f(x):\\ud800\\nreturn 1\\n"}\n',
    "messages": '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok \\udfff"}]}\n',
}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _refused(capsys, argv: list[str], *words: str) -> str:
    """``draftlab ARGV`` ends in exit 2 with one error line holding ``words`` (the last on stderr, where a
    model's loading bar may come before it), and nothing on stdout."""
    code = main(argv)
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("draftlab: error:")]  # beside loading bars
    assert code == 2 and len(errors) == 1 and err.endswith(errors[0] + "\n") and "Traceback" not in err, err
    assert out == "" and all(w in errors[0] for w in words), err
    return errors[0]


@pytest.fixture
def pair(toy_pair) -> list[str]:
    return ["--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir)]


@pytest.mark.parametrize("kind", sorted(SURROGATE_ROWS))
def test_a_lone_surrogate_in_prompts_is_one_line_everywhere(kind, pair, toy_pair, tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(SURROGATE_ROWS[kind])
    before = _digest(prompts)
    escape = "\\ud800" if kind == "prompt" else "\\udc00"
    where = f"{prompts}:1"
    _refused(capsys, ["generate", *pair, "--prompts", str(prompts), "--max-new-tokens", "4"], where, escape)
    _refused(capsys, ["probe", *pair, "--prompts", str(prompts), "--max-new-tokens", "4"], where, escape)
    _refused(capsys, ["assess", *pair, "--prompts", str(prompts), "--out", str(tmp_path / "assess")], escape)
    _refused(capsys, ["bench", "--base-url", "http://127.0.0.1:9", "--prompts", str(prompts)], "line 1", escape)
    assert _digest(prompts) == before and not (tmp_path / "assess").exists()


@pytest.mark.parametrize("kind", sorted(TRAIN_ROWS))
def test_a_lone_surrogate_in_training_data_is_one_line(kind, toy_pair, tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text(TRAIN_ROWS[kind])
    before = _digest(data)
    _refused(capsys, ["train", "--target", str(toy_pair.target_dir), "--data", str(data), "--out",
                      str(tmp_path / "out"), "--max-steps", "1"], "line 1", "lone surrogate")
    _refused(capsys, ["vocab", "count", "--data", str(data), "--tokenizer", str(toy_pair.target_dir), "-o",
                      str(tmp_path / "counts.json")], "line 1", "lone surrogate")  # the same rows, counted
    assert _digest(data) == before and not (tmp_path / "out").exists() and not (tmp_path / "counts.json").exists()


def test_bench_prompts_with_a_byte_that_is_not_utf8(tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(b'{"prompt": "fine"}\n{"prompt": "abc \xff def"}\n')
    before = _digest(prompts)
    _refused(capsys, ["bench", "--base-url", "http://127.0.0.1:9", "--prompts", str(prompts)],
             "line 2 is not UTF-8 (byte 0xff)")
    assert _digest(prompts) == before


@pytest.fixture
def result_file(tmp_path) -> Path:
    """A minimal probe result for ``report`` to render."""
    path = tmp_path / "probe.json"
    path.write_text(json.dumps({
        "config": {"responses": "given", "steps": 1, "topk": 1, "num_draft_tokens": 2, "max_new_tokens": 4},
        "mean_accept_length": 1.5, "acceptance_by_step": [0.5], "accept_length_histogram": [0, 1, 1],
        "results": [{"prompt_index": 0, "accept_lengths": [1, 2], "num_cycles": 2, "continuation_tokens": 3,
                     "target_disagreement": None}]}))
    return path


def test_an_output_through_a_link_to_a_file_is_written_there_and_the_link_stays(result_file, tmp_path, capsys):
    (tmp_path / "pages").mkdir()
    real = tmp_path / "pages" / "real.html"
    real.write_text("old")
    link = tmp_path / "latest.html"
    link.symlink_to(Path("pages") / "real.html")
    assert main(["report", str(result_file), "-o", str(link)]) == 0
    capsys.readouterr()
    assert link.is_symlink() and os.readlink(link) == str(Path("pages") / "real.html")
    assert real.read_text().startswith("<!doctype html>")
    inside = tmp_path / "to-input.html"
    inside.symlink_to(result_file)
    before = _digest(result_file)
    _refused(capsys, ["report", str(result_file), "-o", str(inside)], "is a result file itself")
    assert inside.is_symlink() and _digest(result_file) == before


@pytest.mark.parametrize("target", ["/proc/self/fd/1", "/dev/stdout", "missing.html"])
def test_an_output_link_to_standard_output_or_nowhere_is_refused(target, result_file, tmp_path, capsys):
    link = tmp_path / "out.html"
    link.symlink_to(target)
    err = _refused(capsys, ["report", str(result_file), "-o", str(link)], str(link), target)
    assert ("does not exist" if target == "missing.html" else "standard output") in err
    assert link.is_symlink() and os.readlink(link) == target and not (tmp_path / "missing.html").exists()


def test_a_redirected_run_keeps_its_stdout_link(result_file, tmp_path):
    """As the issue ran it: ``-o`` a link to /proc/self/fd/1 with stdout redirected to a file."""
    link, redirected = tmp_path / "fd1.html", tmp_path / "stdout.txt"
    link.symlink_to("/proc/self/fd/1")
    with redirected.open("w") as stdout:
        proc = subprocess.run([sys.executable, "-m", "draftlab", "report", str(result_file), "-o", str(link)],
                              stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300, check=False,
                              env={**os.environ, "PYTHONPATH": SRC})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert link.is_symlink() and redirected.read_text() == ""


def test_a_dangling_link_as_output_folder_fails_before_any_work(pair, toy_pair, tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "def f(x):"}\n')
    link = tmp_path / "out"
    link.symlink_to("gone")
    for argv in (["assess", *pair, "--prompts", str(prompts), "--out", str(link)],
                 ["train", "--target", str(toy_pair.target_dir), "--data", str(prompts), "--out", str(link),
                  "--max-steps", "1"]):
        _refused(capsys, argv, str(link), "gone, which does not exist")
        assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["out", "prompts.jsonl"]


def test_plan_schedule_where_speculation_always_loses_is_a_result(tmp_path, capsys):
    sys.path.insert(0, str(Path(__file__).parents[1] / "cost"))
    from cost_fixtures import profile_doc, write_json

    costs = write_json(tmp_path / "profile.json", profile_doc())
    for engine, value in (("vllm", {"num_speculative_tokens": 0, "num_speculative_tokens_per_batch_size": [[1, 8, 0]]}),
                          ("sglang", {"1": {"candidate_steps": [0]}}),
                          ("trtllm", {"max_draft_len": 0, "draft_len_schedule": {"8": 0}})):
        out = tmp_path / f"{engine}.json"
        code = main(["plan", "--costs", str(costs), "--grid", "3/1/4:1.0,1/1/2:1.0", "--schedule", engine,
                     "--schedule-out", str(out), "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert code == 0 and doc["schedule"] == value and json.loads(out.read_text()) == value
        assert all(r[2] == 0 for r in doc["schedule_plan"]["ranges"]) and "Speculation loses" in doc["verdict"]
        assert "serve without a drafter" in doc["schedule_plan"]["notes"][0]
