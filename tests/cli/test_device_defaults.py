"""Defaults that fit the device: bfloat16 on GPUs, float32 on the CPU, and the JSON names the dtype used."""

from __future__ import annotations

import json

import pytest

from draftlab.cli import main
from draftlab.models.devices import default_dtype


@pytest.mark.parametrize(("device", "device_map", "dtype"), [
    ("cpu", None, "float32"), (None, None, "float32"), ("cuda", None, "bfloat16"), ("cuda:1", None, "bfloat16"),
])
def test_default_dtype(device, device_map, dtype):
    assert default_dtype(device, device_map) == dtype


def test_a_device_map_means_the_gpus_when_there_are_some(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert default_dtype(None, "auto") == "float32"  # accelerate places everything on the CPU
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert default_dtype(None, "auto") == "bfloat16"


def test_commands_name_the_dtype_they_ran_in(toy_pair, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"input_ids": list(b"def f(x):\n")}) + "\n")
    pair = ["--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir), "--prompts", str(prompts)]
    flags = ["--steps", "2", "--topk", "1", "--num-draft-tokens", "3", "--max-new-tokens", "8", "--json"]
    for argv in (["generate", *pair, *flags], ["probe", *pair, *flags],
                 ["generate", *pair, *flags, "--dtype", "bfloat16"]):
        assert main(argv) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["config"]["dtype"] == ("bfloat16" if "--dtype" in argv else "float32")
