"""Every unusable input: one stderr line naming the file, exit 2, nothing on stdout, no traceback."""

from __future__ import annotations

import json
import re
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


# case -> (break the folder and return the path to inspect, expected words, the file the message
# must name, relative to the checkpoint folder): always the offending file, never just the folder.
CASES = {
    "missing path": (lambda f: f / "nope", "no such file", "nope"),
    "invalid JSON": (lambda f: ((f / "config.json").write_text("{oops"), f)[1], "invalid JSON", "config.json"),
    "truncated file": (lambda f: ((f / "model.safetensors").write_bytes(b"\x01\x02"), f)[1], "shorter than",
                       "model.safetensors"),
    "header length beyond file": (lambda f: (_header_file(f / "model.safetensors", {}, length=4096), f)[1],
                                  "runs past the end", "model.safetensors"),
    "huge header length": (lambda f: (_header_file(f / "model.safetensors", {}, length=2**62), f)[1],
                           "above the", "model.safetensors"),
    "malformed header": (lambda f: (_header_file(f / "model.safetensors", b"{not json"), f)[1], "malformed",
                         "model.safetensors"),
    "offsets outside data": (lambda f: (_header_file(f / "model.safetensors", {
        "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8), f)[1], "outside the 8-byte",
        "model.safetensors"),
    "unknown dtype": (lambda f: (_header_file(f / "model.safetensors", {
        "w": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, b"\0"), f)[1], "unknown dtype",
        "model.safetensors"),
    "index outside folder": (lambda f: ((f / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "../../etc/passwd"}})), f)[1], "outside the checkpoint folder",
        "model.safetensors.index.json"),
    "missing config field": (lambda f: f,
                             "'num_attention_heads' is missing", "config.json"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, case):
    make, expected, culprit = CASES[case]
    folder = _folder(tmp_path)
    path = make(folder)
    assert main(["inspect", str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in err
    # The message names the offending file by its full path (unique to this test's tmp_path), so
    # naming only the folder, or another file in it, fails; the lookahead keeps "model.safetensors"
    # from matching inside "model.safetensors.index.json".
    named = re.escape(str(folder / culprit)) + r"(?![\w.])"
    assert re.search(named, lines[0]), f"{lines[0]!r} does not name {folder / culprit}"


def test_bad_target_in_check_writes_nothing(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    (target / "model.safetensors").write_bytes((target / "model.safetensors").read_bytes()[:1000])
    assert main(["check", str(drafter), "-t", str(target), "--fix", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
    assert "model.safetensors" in capsys.readouterr().err
