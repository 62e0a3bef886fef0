"""Every unusable input: one stderr line naming the file, exit 2, nothing on stdout, no traceback."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from builders import make_pair

from draftlab.cli import main


def _header_file(path: Path, header: object, data: bytes = b"", length: int | None = None) -> None:
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)


def _folder(tmp: Path) -> Path:
    folder = tmp / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 8}))
    _header_file(folder / "model.safetensors", {})
    return folder


CASES = {
    "missing path": (lambda f: f / "nope", "no such file"),
    "invalid JSON": (lambda f: ((f / "config.json").write_text("{oops"), f)[1], "invalid JSON"),
    "truncated file": (lambda f: ((f / "model.safetensors").write_bytes(b"\x01\x02"), f)[1], "shorter than"),
    "header length beyond file": (lambda f: (_header_file(f / "model.safetensors", {}, length=4096), f)[1],
                                  "runs past the end"),
    "huge header length": (lambda f: (_header_file(f / "model.safetensors", {}, length=2**62), f)[1],
                           "above the"),
    "malformed header": (lambda f: (_header_file(f / "model.safetensors", b"{not json"), f)[1], "malformed"),
    "offsets outside data": (lambda f: (_header_file(f / "model.safetensors", {
        "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8), f)[1], "outside the 8-byte"),
    "unknown dtype": (lambda f: (_header_file(f / "model.safetensors", {
        "w": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, b"\0"), f)[1], "unknown dtype"),
    "index outside folder": (lambda f: ((f / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "../../etc/passwd"}})), f)[1], "outside the checkpoint folder"),
    "missing config field": (lambda f: f,
                             "'num_attention_heads' is missing"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, case):
    make, expected = CASES[case]
    path = make(_folder(tmp_path))
    assert main(["inspect", str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in err
    assert str(path.name if path.name != "m" else "m") in lines[0]


def test_bad_target_in_check_writes_nothing(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    (target / "model.safetensors").write_bytes((target / "model.safetensors").read_bytes()[:1000])
    assert main(["check", str(drafter), "-t", str(target), "--fix", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
    assert "model.safetensors" in capsys.readouterr().err
