"""safetensors structure exactly as the library checks it: every file the installed ``safetensors`` refuses,
draftlab refuses in one line naming the file (exit 2), before reading any tensor; every file it opens, draftlab
opens. Each case asserts the library's own verdict on the same bytes, so a library change shows up here."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from builders import folder_hash, make_pair
from hypothesis import given, settings
from hypothesis import strategies as st

from draftlab.checkpoint.safetensors_header import read_header
from draftlab.cli import main
from draftlab.errors import DraftlabError


def blob(header: object = None, data: bytes = b"", *, raw: bytes | None = None) -> bytes:
    text = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def f32(begin: int, end: int, shape: list[int] | None = None) -> dict:
    return {"dtype": "F32", "shape": [(end - begin) // 4] if shape is None else shape, "data_offsets": [begin, end]}


def library_opens(path: Path) -> bool:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            names = f.keys()
            for name in names:
                f.get_tensor(name)
    except Exception:  # noqa: BLE001 - the library raises SafetensorError, and others for some dtypes
        return False
    return True


def draftlab_opens(path: Path) -> bool:
    try:
        read_header(path)
    except DraftlabError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        return False
    return True


ENTRY = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]'
REFUSED = {  # case -> (bytes, words of draftlab's line)
    "trailing bytes": (blob({"a": f32(0, 8)}, b"\0" * 9), "1 trailing byte(s)"),
    "unused bytes between tensors": (blob({"a": f32(0, 8), "b": f32(12, 20)}, b"\0" * 20), "unused bytes"),
    "a hole at the start": (blob({"a": f32(4, 12)}, b"\0" * 12), "not at 0"),
    "overlapping tensors": (blob({"a": f32(0, 8), "b": f32(4, 12)}, b"\0" * 12), "overlaps"),
    "end before begin": (blob({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, b"\0" * 8),
                         "ends before it begins"),
    "size not dtype times shape": (blob({"a": f32(0, 8, [3])}, b"\0" * 8), "needs 12"),
    "no tensors but data": (blob({}, b"\0"), "trailing byte"),
    "F4 of an odd count": (blob({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, b"\0\0"),
                           "not a whole number of bytes"),
    "F6, which torch cannot load": (blob({"a": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [0, 3]}},
                                         b"\0" * 3), "cannot load into PyTorch"),
    "element count overflowing 64 bits": (blob({"a": {"dtype": "U8", "shape": [2**32, 2**32, 0],
                                                      "data_offsets": [0, 0]}}), "overflows"),
    "header of 100,000,001 bytes": (struct.pack("<Q", 100_000_001) + b"{}" + b" " * 8, "above the 100000000-byte"),
    "metadata not all strings": (blob({"__metadata__": {"format": 1}, "a": f32(0, 8)}, b"\0" * 8),
                                 "strings to strings"),
    "metadata twice": (blob(raw=b'{"__metadata__":{},"__metadata__":{},' + ENTRY[1:] + b'}}', data=b"\0" * 8),
                       "__metadata__ appears twice"),
    "a field given twice": (blob(raw=ENTRY + b',"dtype":"F32"}}', data=b"\0" * 8), "dtype twice"),
    "NaN in the header": (blob(raw=ENTRY + b',"x":NaN}}', data=b"\0" * 8), "not valid JSON"),
    "a number out of range": (blob(raw=ENTRY + b',"x":1e400}}', data=b"\0" * 8), "not valid JSON"),
    "a lone surrogate escape": (blob(raw=ENTRY + b',"x":"\\ud800"}}', data=b"\0" * 8), "not valid JSON"),
    "nesting 128 deep": (blob(raw=ENTRY + b',"x":' + b"[" * 126 + b"]" * 126 + b"}}", data=b"\0" * 8),
                         "nested more than 127"),
    "-0 as a dimension": (blob(raw=b'{"a":{"dtype":"F32","shape":[-0],"data_offsets":[0,0]}}'), "invalid shape"),
    "a dimension past 64 bits": (blob(raw=b'{"a":{"dtype":"F32","shape":[18446744073709551616],'
                                          b'"data_offsets":[0,0]}}'), "invalid shape"),
}
OPENED = {  # the library opens these: so must draftlab
    "tensors listed out of offset order": blob({"b": f32(8, 16), "a": f32(0, 8)}, b"\0" * 16),
    "zero-size tensors": blob({"z": f32(0, 0, [0]), "a": f32(0, 8), "y": f32(8, 8, [0])}, b"\0" * 8),
    "whitespace around the header": blob(raw=b" \n" + ENTRY + b"}}\t ", data=b"\0" * 8),
    "a tensor name given twice (the last wins)": blob(raw=ENTRY + b'},' + ENTRY[1:] + b"}}", data=b"\0" * 8),
    "an entry as the 3-element array": blob(raw=b'{"a":["F32",[2],[0,8]]}', data=b"\0" * 8),
    "unknown entry fields, -0 among them": blob(raw=ENTRY + b',"x":-0,"y":[[1.5e308]]}}', data=b"\0" * 8),
    "nesting 127 deep": blob(raw=ENTRY + b',"x":' + b"[" * 125 + b"]" * 125 + b"}}", data=b"\0" * 8),
    "null metadata": blob({"__metadata__": None, "a": f32(0, 8)}, b"\0" * 8),
    "the FNUZ float8 dtypes": blob({"a": {"dtype": "F8_E4M3FNUZ", "shape": [2], "data_offsets": [0, 2]},
                                    "b": {"dtype": "F8_E5M2FNUZ", "shape": [2], "data_offsets": [2, 4]}}, b"\0" * 4),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_the_library_refuses_draftlab_refuses_in_one_line(tmp_path, case):
    data, words = REFUSED[case]
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    assert not library_opens(path)
    with pytest.raises(DraftlabError) as err:
        read_header(path)
    assert words in str(err.value) and "\n" not in str(err.value) and str(path) in str(err.value)
    assert path.read_bytes() == data


@pytest.mark.parametrize("case", OPENED)
def test_what_the_library_opens_draftlab_opens(tmp_path, case):
    path = tmp_path / "model.safetensors"
    path.write_bytes(OPENED[case])
    assert library_opens(path) and draftlab_opens(path)


@pytest.mark.parametrize("command", ["check", "inspect"])
def test_a_drafter_with_trailing_bytes_is_refused_by_the_commands(tmp_path, target_configs, capsys, command):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    weights = drafter / "model.safetensors"
    weights.write_bytes(weights.read_bytes() + b"\0" * 4)
    assert not library_opens(weights)
    before = folder_hash(drafter)
    args = ["check", str(drafter), "-t", str(target)] if command == "check" else ["inspect", str(drafter)]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert str(weights) in err and "4 trailing byte(s)" in err
    assert folder_hash(drafter) == before


def _mutated(data: bytes, header: dict, draw) -> bytes:
    """A valid two-tensor file with one offset, shape, dtype or the data length changed."""
    header = json.loads(json.dumps(header))
    name = draw(st.sampled_from(["a", "b"]))
    what = draw(st.sampled_from(["offset", "shape", "dtype", "data"]))
    if what == "offset":
        header[name]["data_offsets"][draw(st.integers(0, 1))] += draw(st.integers(-6, 6))
    elif what == "shape":
        header[name]["shape"] = draw(st.lists(st.integers(0, 5), max_size=3))
    elif what == "dtype":
        header[name]["dtype"] = draw(st.sampled_from(["F32", "F16", "I64", "U8", "F4", "BOOL", "C64"]))
    else:
        data = data[: draw(st.integers(0, len(data)))] + b"\0" * draw(st.integers(0, 5))
    return blob(header, data)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_library_and_draftlab_agree_on_mutated_files(tmp_path_factory, data):
    header = {"__metadata__": {"format": "pt"}, "a": f32(0, 8), "b": {"dtype": "I64", "shape": [2],
                                                                       "data_offsets": [8, 24]}}
    path = tmp_path_factory.mktemp("st") / "model.safetensors"
    path.write_bytes(_mutated(b"\0" * 24, header, data.draw))
    assert library_opens(path) == draftlab_opens(path)
    shutil.rmtree(path.parent)


@pytest.mark.parametrize("command", ["generate", "probe"])
def test_the_computing_commands_refuse_a_file_the_library_refuses(tmp_path, toy_pair, capsys, command):
    """generate ended in the library's traceback on such a file: one line naming it, exit 2, input unchanged."""
    drafter = tmp_path / "drafter"
    shutil.copytree(toy_pair.drafter_dir, drafter)
    weights = drafter / "model.safetensors"
    weights.write_bytes(weights.read_bytes() + b"\0" * 3)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "def add(a, b):"}) + "\n")
    before = folder_hash(drafter)
    args = [command, "--target", str(toy_pair.target_dir), "--drafter", str(drafter), "--prompts", str(prompts),
            "--steps", "2", "--topk", "1", "--num-draft-tokens", "3"]
    assert main(args) == 2
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(weights) in lines[0] and "3 trailing byte(s)" in lines[0], err
    assert "Traceback" not in err and folder_hash(drafter) == before
