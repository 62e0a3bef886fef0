"""Paths and files: nothing is read from outside a checkpoint folder, no command writes into or over
its inputs, and a failed write (disk full, no permission) leaves nothing and says so in one line."""

from __future__ import annotations

import errno
import json
import os

import pytest
from builders import folder_hash, make_pair

from draftlab.checkpoint import open_checkpoint
from draftlab.cli import main
from draftlab.errors import DraftlabError


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


# --- reading: files resolving outside the folder --------------------------------------------------

def test_weights_symlinked_out_of_the_folder_are_refused(tmp_path, target_configs, capsys):
    drafter, _ = make_pair(tmp_path, target_configs["llama"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (drafter / "model.safetensors").rename(elsewhere / "model.safetensors")
    (drafter / "model.safetensors").symlink_to(elsewhere / "model.safetensors")
    assert main(["inspect", str(drafter), "--json"]) == 2
    line = one_line(capsys)
    assert str(drafter / "model.safetensors") in line and "outside the checkpoint folder" in line


def test_config_symlinked_out_of_the_folder_is_refused(tmp_path, target_configs):
    drafter, _ = make_pair(tmp_path, target_configs["llama"])
    (drafter / "config.json").rename(tmp_path / "secret.json")
    (drafter / "config.json").symlink_to(tmp_path / "secret.json")
    with pytest.raises(DraftlabError, match="outside the checkpoint folder"):
        open_checkpoint(drafter)


def test_index_entry_through_a_symlinked_subfolder_is_refused(tmp_path, target_configs):
    """The entry's name is plain ("sub/model.safetensors") but the folder it names is a link elsewhere."""
    drafter, _ = make_pair(tmp_path, target_configs["llama"])
    names = list(open_checkpoint(drafter).tensors)
    outside = tmp_path / "outside"
    outside.mkdir()
    (drafter / "model.safetensors").rename(outside / "model.safetensors")
    (drafter / "sub").symlink_to(outside, target_is_directory=True)
    (drafter / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": dict.fromkeys(names, "sub/model.safetensors")}))
    with pytest.raises(DraftlabError, match="outside the checkpoint folder") as info:
        open_checkpoint(drafter)
    assert "sub/model.safetensors" in str(info.value)


def test_an_index_entry_inside_a_real_subfolder_and_a_linked_folder_are_fine(tmp_path, target_configs):
    drafter, _ = make_pair(tmp_path, target_configs["llama"])
    names = list(open_checkpoint(drafter).tensors)
    (drafter / "sub").mkdir()
    (drafter / "model.safetensors").rename(drafter / "sub" / "model.safetensors")
    (drafter / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": dict.fromkeys(names, "sub/model.safetensors")}))
    (tmp_path / "link").symlink_to(drafter, target_is_directory=True)  # the folder itself may be a link
    assert set(open_checkpoint(tmp_path / "link").tensors) == set(names)


def test_other_files_symlinked_out_are_not_copied_by_fix(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"], max_position_embeddings=1024)
    (tmp_path / "id_rsa").write_text("secret")
    (drafter / "tokenizer.json").symlink_to(tmp_path / "id_rsa")
    assert main(["check", str(drafter), "-t", str(target), "--fix", str(tmp_path / "fixed")]) == 2
    assert "tokenizer.json" in one_line(capsys)
    assert not (tmp_path / "fixed").exists() and _siblings(tmp_path) == []


# --- writing: never into or over an input ---------------------------------------------------------

def test_refuse_overlap_relations(tmp_path):
    from draftlab.fsutil import refuse_overlap

    (tmp_path / "in").mkdir()
    for out, words in ((tmp_path / "in", "itself"), (tmp_path / "in" / "x", "inside"), (tmp_path, "holds")):
        with pytest.raises(DraftlabError, match=words):
            refuse_overlap(out, {"--target": tmp_path / "in"})
    refuse_overlap(tmp_path / "out", {"--target": tmp_path / "in", "--data": None})


@pytest.mark.parametrize("where", ["drafter", "target"])
def test_fix_and_remap_refuse_outputs_inside_their_inputs(tmp_path, target_configs, capsys, where):
    drafter, target = make_pair(tmp_path, target_configs["llama"], max_position_embeddings=1024)
    hashes = folder_hash(drafter), folder_hash(target)
    out = (drafter if where == "drafter" else target) / "out"
    assert main(["check", str(drafter), "-t", str(target), "--fix", str(out)]) == 2
    assert "inside" in one_line(capsys)
    mapping = tmp_path / "map.safetensors"
    from draftlab.vocab import VocabMapping

    VocabMapping.from_target_ids(list(range(0, 256, 2)), 512).save(mapping)
    args = ["vocab", "remap", str(drafter), "--mapping", str(mapping), "-o", str(out)]
    assert main(args + (["--target", str(target)] if where == "target" else [])) == 2
    assert "inside" in one_line(capsys)
    assert (folder_hash(drafter), folder_hash(target)) == hashes and not out.exists()


def test_train_capture_regenerate_refuse_outputs_inside_their_inputs(tmp_path, target_configs):
    from draftlab.train.capture import capture
    from draftlab.train.trainer import TrainOptions, train

    drafter, target = make_pair(tmp_path, target_configs["llama"])
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"input_ids": [1, 2, 3]}) + "\n")
    with pytest.raises(DraftlabError, match="inside --target"):
        train(TrainOptions(target=target, out=target / "run", data=data, max_steps=1))
    with pytest.raises(DraftlabError, match="inside --init"):
        train(TrainOptions(target=target, out=drafter / "run", data=data, init=drafter, max_steps=1))
    with pytest.raises(DraftlabError, match="inside --target"):
        capture(target, data, target / "features")
    with pytest.raises(DraftlabError, match="is --data itself"):
        capture(target, data, data, resume=True)
    from draftlab.train.regenerate import regenerate

    with pytest.raises(DraftlabError, match="inside --target"):
        regenerate(data, target / "answers.jsonl", target=target)
    assert not (target / "run").exists() and not (target / "features").exists()


# --- writing: a failed write leaves nothing ---------------------------------------------------------

def _siblings(folder) -> list[str]:
    """Temporary siblings left behind (``.NAME.*.tmp``)."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
@pytest.mark.parametrize("command", ["fix", "convert"])
def test_a_failed_write_leaves_no_output_and_is_one_line(tmp_path, target_configs, capsys, monkeypatch,
                                                         code, command):
    drafter, target = make_pair(tmp_path, target_configs["llama"], layer_prefix="layers.0.",
                                max_position_embeddings=1024)
    before = folder_hash(drafter)
    out = tmp_path / "out"

    def failing_replace(src, dst):
        raise OSError(code, os.strerror(code), str(dst))

    monkeypatch.setattr("draftlab.fsutil.os.replace", failing_replace)
    args = (["check", str(drafter), "-t", str(target), "--fix", str(out)] if command == "fix" else
            ["convert", str(drafter), "--to", "speculators", "-o", str(out), "-t", str(target)])
    assert main(args) == 2
    line = one_line(capsys)
    assert str(out) in line and os.strerror(code) in line and "nothing was written" in line
    assert not out.exists() and _siblings(tmp_path) == []
    assert folder_hash(drafter) == before


def test_disk_full_in_the_middle_of_the_weights(tmp_path, target_configs, capsys, monkeypatch):
    """ENOSPC while the renamed safetensors data is copied: the half-written folder is removed."""
    drafter, _ = make_pair(tmp_path, target_configs["llama"], layer_prefix="layers.0.")

    def full(src, dst, length=0):
        dst.write(src.read(100))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("draftlab.checkpoint.write.shutil.copyfileobj", full)
    assert main(["convert", str(drafter), "--to", "specforge", "-o", str(tmp_path / "out")]) == 2
    line = one_line(capsys)
    assert "No space left on device" in line and str(tmp_path / "out") in line
    assert not (tmp_path / "out").exists() and _siblings(tmp_path) == []


def test_file_writers_refuse_to_write_over_their_inputs(tmp_path, target_configs, capsys):
    """vocab count -o over its data (or into the tokenizer folder), vocab build -o over its counts."""
    _, target = make_pair(tmp_path, target_configs["llama"])
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"input_ids": [1, 2, 3]}) + "\n")
    before = data.read_bytes()
    assert main(["vocab", "count", "--data", str(data), "--vocab-size", "512", "-o", str(data)]) == 2
    assert "itself" in one_line(capsys) and data.read_bytes() == before
    assert main(["vocab", "count", "--data", str(data), "--tokenizer", str(target), "-o",
                 str(target / "counts.json")]) == 2
    assert "inside --tokenizer" in one_line(capsys) and not (target / "counts.json").exists()
    counts = tmp_path / "counts.json"
    assert main(["vocab", "count", "--data", str(data), "--vocab-size", "512", "-o", str(counts)]) == 0
    capsys.readouterr()
    before = counts.read_bytes()
    assert main(["vocab", "build", "--counts", str(counts), "--size", "4", "-o", str(counts)]) == 2
    assert "is --counts itself" in one_line(capsys) and counts.read_bytes() == before
