"""Readers open only regular files, and every path that cannot be read says its true reason in one line:
a FIFO named model.safetensors no longer hangs inspect, a symlink loop is not "no such file", a folder
given as a file is not "not found"."""

from __future__ import annotations

import os

import pytest
from builders import make_pair

from draftlab.cli import main


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


@pytest.mark.timeout(60)
def test_a_fifo_named_model_safetensors_is_refused_not_waited_on(tmp_path, target_configs, capsys):
    drafter, _ = make_pair(tmp_path, target_configs["llama"])
    (drafter / "model.safetensors").unlink()
    os.mkfifo(drafter / "model.safetensors")
    assert main(["inspect", str(drafter)]) == 2
    assert one_line(capsys) == (f"draftlab: error: {drafter / 'model.safetensors'}: is a named pipe (FIFO), not a "
                                "regular file; draftlab reads only regular files (copy its contents into one)")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json"])
def test_a_fifo_config_or_index_is_refused(tmp_path, target_configs, capsys, name):
    drafter, _ = make_pair(tmp_path, target_configs["llama"])
    (drafter / name).unlink(missing_ok=True)
    os.mkfifo(drafter / name)
    assert main(["inspect", str(drafter)]) == 2
    assert f"{drafter / name}: is a named pipe (FIFO)" in one_line(capsys)


def test_a_symlink_loop_says_so(tmp_path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert main(["inspect", str(tmp_path / "a")]) == 2
    assert "is a symlink loop" in one_line(capsys)
    assert main(["bench", "--base-url", "http://127.0.0.1:9", "--prompts", str(tmp_path / "a")]) == 2
    assert "is a symlink loop" in one_line(capsys)


def test_a_config_link_looping_inside_the_folder_says_so(tmp_path, target_configs, capsys):
    drafter, _ = make_pair(tmp_path, target_configs["llama"])
    (drafter / "config.json").unlink()
    (drafter / "config.json").symlink_to(drafter / "config.json")
    assert main(["inspect", str(drafter)]) == 2
    assert f"{drafter / 'config.json'}: is a symlink loop" in one_line(capsys)


def test_a_dangling_link_names_where_it_points(tmp_path, capsys):
    (tmp_path / "prompts.jsonl").symlink_to(tmp_path / "gone.jsonl")
    assert main(["bench", "--base-url", "http://127.0.0.1:9", "--prompts", str(tmp_path / "prompts.jsonl")]) == 2
    assert f"is a symlink to {tmp_path / 'gone.jsonl'}, which does not exist" in one_line(capsys)


@pytest.mark.parametrize("args", [
    ["bench", "--base-url", "http://127.0.0.1:9", "--prompts", "{d}"],
    ["plan", "--costs", "{d}"],
    ["bench", "compare", "{d}"],
    ["report", "{d}", "-o", "{o}"],
    ["vocab", "build", "--counts", "{d}", "--size", "4", "-o", "{o}"],
    ["vocab", "count", "--data", "{d}", "--vocab-size", "8", "-o", "{o}"],
])
def test_a_folder_given_as_a_file_says_so(tmp_path, capsys, args):
    folder = tmp_path / "folder"
    folder.mkdir()
    argv = [a.format(d=folder, o=tmp_path / "out") for a in args]
    assert main(argv) == 2
    assert one_line(capsys) == f"draftlab: error: {folder}: is a folder; expected a file"
    assert not (tmp_path / "out").exists()


def test_a_fifo_given_as_prompts_or_data_is_refused(tmp_path, capsys):
    os.mkfifo(tmp_path / "rows.jsonl")
    assert main(["vocab", "count", "--data", str(tmp_path / "rows.jsonl"), "--vocab-size", "8", "-o",
                 str(tmp_path / "counts.json")]) == 2
    assert "is a named pipe (FIFO)" in one_line(capsys)
    assert main(["plan", "--costs", str(tmp_path / "rows.jsonl")]) == 2
    assert "is a named pipe (FIFO)" in one_line(capsys)
