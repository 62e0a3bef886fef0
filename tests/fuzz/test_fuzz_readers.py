"""Every reader of published files, fuzzed: each input ends in a result or one DraftlabError (exit 2),
never another exception. Inputs are structure-aware mutations of valid files (fuzz_targets.py); the
``@example`` cases are the crashes this fuzzing found, kept as regressions. Example counts per target:
fuzz_profiles.py (150 in CI; DRAFTLAB_FUZZ_PROFILE=long for 5000)."""

from __future__ import annotations

import json
import os
import stat
import struct

import fuzz_targets
import pytest
from fuzz_profiles import FUZZ
from fuzz_targets import (
    BY_NAME,
    TARGET_CONFIG,
    VALID_ACCEPTANCE,
    VALID_DATA,
    VALID_HEADER,
    VALID_INDEX,
    VALID_PROBE,
    VALID_PROFILE,
    deep,
    run_target,
    safetensors_bytes,
)
from hypothesis import example, given

from draftlab.errors import DraftlabError


def _holds(name: str, value) -> None:
    """The contract: a result, or a DraftlabError whose message is one line."""
    try:
        run_target(BY_NAME[name], value)
    except DraftlabError as exc:
        assert "\n" not in str(exc), str(exc)


@FUZZ
@given(BY_NAME["safetensors header"].strategy)
@example(struct.pack("<Q", 2**60) + b"{}")  # a length claiming 2^60 bytes must not allocate
@example(struct.pack("<Q", 100_000) + b"[" * 100_000)  # nesting past Python's recursion limit
@example(safetensors_bytes({"x": {"dtype": "F32", "shape": [10**400], "data_offsets": [0, 0]}}, b""))
@example(safetensors_bytes({"x": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4))  # unhashable
def test_safetensors_header(blob):
    _holds("safetensors header", blob)


@FUZZ
@given(BY_NAME["config.json (target, drafter)"].strategy)
@example(json.dumps(TARGET_CONFIG).replace('"hidden_size": 64', '"hidden_size": ' + "9" * 5000))  # past int()'s limit
@example(deep(100_000))
def test_configs(text):
    _holds("config.json (target, drafter)", text)


@FUZZ
@given(BY_NAME["model.safetensors.index.json"].strategy)
@example(json.dumps({**VALID_INDEX, "weight_map": {"d2t": "../outside.safetensors"}}))
@example(deep(100_000))
def test_index(text):
    _holds("model.safetensors.index.json", text)


@FUZZ
@given(BY_NAME["prompts (decode/prompts.py)"].strategy)
@example(b'{"input_ids": [' + b"9" * 5000 + b"]}")
@example(deep(100_000).encode())
def test_prompts(blob):
    _holds("prompts (decode/prompts.py)", blob)


@FUZZ
@given(BY_NAME["vocab count rows (vocab/rows.py)"].strategy)
@example(b'{"input_ids": [' + b"9" * 5000 + b"]}")
@example(deep(100_000).encode())
def test_vocab_count_rows(blob):
    _holds("vocab count rows (vocab/rows.py)", blob)


@FUZZ
@given(BY_NAME["train rows (train/data.py)"].strategy)
@example(b'{"input_ids": [' + b"9" * 5000 + b"]}")
@example(b"\xff\xfe")
@example(deep(100_000).encode())
def test_train_rows(blob):
    _holds("train rows (train/data.py)", blob)


@FUZZ
@given(BY_NAME["feature files (probe/features.py)"].strategy)
@example(("data_0.pt", b""))  # torch.load's EOFError carries no message
@example(("data_0.ckpt", b"\x80\x02}q\x00(X"))  # a cut pickle: IndexError inside the unpickler
def test_feature_files(named):
    _holds("feature files (probe/features.py)", named)


@FUZZ
@given(BY_NAME["d2t/t2d mapping file (vocab/mapping.py)"].strategy)
@example(safetensors_bytes(VALID_HEADER, VALID_DATA))
@example(safetensors_bytes({"d2t": {"dtype": {}, "shape": [4], "data_offsets": [0, 32]}}, VALID_DATA[:32]))
def test_mapping_file(blob):
    _holds("d2t/t2d mapping file (vocab/mapping.py)", blob)


@FUZZ
@given(BY_NAME["drafter d2t/t2d (reader, arrays.py, d2t.py)"].strategy)
@example(safetensors_bytes(VALID_HEADER, VALID_DATA))
def test_drafter_mapping(blob):
    _holds("drafter d2t/t2d (reader, arrays.py, d2t.py)", blob)


@FUZZ
@given(BY_NAME["PROFILE.json (plan)"].strategy)
@example(json.dumps({**VALID_PROFILE, "context_tokens": "many"}))
@example(json.dumps({**VALID_PROFILE, "environment": [1, 2]}))
@example(deep(100_000))
def test_profile(text):
    _holds("PROFILE.json (plan)", text)


@FUZZ
@given(BY_NAME["probe JSON (plan)"].strategy)
@example(json.dumps({**VALID_PROBE, "config": {"steps": float("inf"), "topk": 1, "num_draft_tokens": 4}}))
@example(deep(100_000))
def test_probes(text):
    _holds("probe JSON (plan)", text)


@FUZZ
@given(BY_NAME["speculation_profile.json (plan --profile, --synthetic-acceptance)"].strategy)
@example(json.dumps({**VALID_ACCEPTANCE, "num_speculative_tokens": float("inf")}))
@example(json.dumps({**VALID_ACCEPTANCE, "marginal_accept_rates": [0.6, "x", 0.0]}))
@example(json.dumps({**VALID_ACCEPTANCE, "accept_length_by_k": [1.9], "conditional_accept_rates": 3}))
@example(json.dumps({**VALID_ACCEPTANCE, "accept_length_by_k": {"3": "x"}, "speculation_config": None}))
@example(deep(100_000))
def test_acceptance_profiles(text):
    _holds("speculation_profile.json (plan --profile, --synthetic-acceptance)", text)


def test_valid_inputs_are_results():
    """The seeds of the mutations are valid: the fuzzing starts from inputs that read."""
    assert run_target(BY_NAME["config.json (target, drafter)"], json.dumps(TARGET_CONFIG)) is not None
    assert run_target(BY_NAME["model.safetensors.index.json"], json.dumps(VALID_INDEX)).keys() == {"d2t", "t2d"}
    assert run_target(BY_NAME["d2t/t2d mapping file (vocab/mapping.py)"], safetensors_bytes(VALID_HEADER, VALID_DATA)) == []
    assert run_target(BY_NAME["PROFILE.json (plan)"], json.dumps(VALID_PROFILE)).verify
    assert run_target(BY_NAME["probe JSON (plan)"], json.dumps(VALID_PROBE))[0].accept_length == 2.5
    accepts, record = run_target(BY_NAME["speculation_profile.json (plan --profile, --synthetic-acceptance)"],
                                 json.dumps(VALID_ACCEPTANCE))
    assert [a.accept_length for a in accepts] == [1.9, 1.6] and record["accept_length"] == pytest.approx(1.9)
    assert len(run_target(BY_NAME["train rows (train/data.py)"], b'{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}'))
    with pytest.raises(DraftlabError):
        run_target(BY_NAME["safetensors header"], struct.pack("<Q", 2**60))


# a valid input of each target: every file it writes is replaced in turn by something that is not a file
VALID = {
    "safetensors header": safetensors_bytes(VALID_HEADER, VALID_DATA),
    "config.json (target, drafter)": json.dumps(TARGET_CONFIG),
    "model.safetensors.index.json": json.dumps(VALID_INDEX),
    "prompts (decode/prompts.py)": b'{"input_ids": [1, 2, 3]}',
    "vocab count rows (vocab/rows.py)": b'{"input_ids": [1, 2, 3]}',
    "train rows (train/data.py)": b'{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}',
    "feature files (probe/features.py)": ("data_0.ckpt", b""),
    "d2t/t2d mapping file (vocab/mapping.py)": safetensors_bytes(VALID_HEADER, VALID_DATA),
    "drafter d2t/t2d (reader, arrays.py, d2t.py)": safetensors_bytes(VALID_HEADER, VALID_DATA),
    "PROFILE.json (plan)": json.dumps(VALID_PROFILE),
    "probe JSON (plan)": json.dumps(VALID_PROBE),
    "speculation_profile.json (plan --profile, --synthetic-acceptance)": json.dumps(VALID_ACCEPTANCE),
}


TRUE_REASON = {"fifo": "is a named pipe (FIFO)", "device": "is a character device", "loop": "is a symlink loop",
               "folder": "is a folder"}
# readers handed the path of their file itself, which take a checkpoint folder there too: a folder is read as one
FOLDER_READERS = {"d2t/t2d mapping file (vocab/mapping.py)": ("d2t.safetensors", "no weights found"),
                  "drafter d2t/t2d (reader, arrays.py, d2t.py)": ("model.safetensors", "no weights found")}


def _make_special(path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # as /dev/null: reads end at once
    elif kind == "loop":
        path.symlink_to(path)
    else:
        path.mkdir()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fifo", "device", "loop", "folder"])
@pytest.mark.parametrize("name", sorted(VALID))
def test_no_reader_opens_a_fifo_device_loop_or_folder(name, kind, monkeypatch):
    """Each file a reader is given, in turn a FIFO (opening it would block forever), a character device, a
    symlink loop or a folder: one DraftlabError line naming the file and saying what it is, never a hang,
    a traceback or a wrong reason ("not found" for a loop or a folder)."""
    if kind == "device" and os.geteuid() != 0:
        pytest.skip("os.mknod of a character device needs root")
    assert set(VALID) == set(BY_NAME)
    write = fuzz_targets._write
    which = 0
    while True:
        written: list[str] = []

        def special(folder, file_name, content, _which=which):
            written.append(file_name)
            if len(written) - 1 != _which:
                return write(folder, file_name, content)
            _make_special(folder / file_name, kind)
            return folder / file_name

        monkeypatch.setattr(fuzz_targets, "_write", special)
        with pytest.raises(DraftlabError) as info:
            run_target(BY_NAME[name], VALID[name])
        message = str(info.value)
        as_folder = FOLDER_READERS.get(name, (None, None))
        reason = as_folder[1] if kind == "folder" and written[which] == as_folder[0] else TRUE_REASON[kind]
        assert "\n" not in message and written[which] in message and reason in message, message
        if which == len(written) - 1:
            break
        which += 1
