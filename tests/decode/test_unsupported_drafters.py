"""A drafter draftlab would compute wrong is refused by every command that runs one, naming the key:
an MoE FFN in the drafter, an unknown variant flag, a variant's tensor without its flag."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from draftlab.cli import main


def _copy(toy_pair, out: Path, *, config: dict | None = None, tensors: dict | None = None) -> Path:
    shutil.copytree(toy_pair.drafter_dir, out)
    if config:
        cfg = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**cfg, **config}))
    if tensors:
        save_file({**load_file(str(out / "model.safetensors")), **tensors}, str(out / "model.safetensors"))
    return out


CASES = {
    "moe": ({"use_moe": True, "n_routed_experts": 4},
            {"midlayer.mlp.experts.0.gate_proj.weight": torch.zeros(192, 64)}, "midlayer.mlp.experts.0.gate_proj"),
    "unknown-flag": ({"norm_after_attention": True}, None, "norm_after_attention"),
    "tensor-without-flag": (None, {"input_norm.weight": torch.ones(192)}, "input_norm.weight"),
}


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text(json.dumps({"input_ids": list(b"def f(x):\n    return")}) + "\n")
    return path


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["generate", "probe", "train"])
def test_commands_that_run_a_drafter_refuse_it_naming_the_key(toy_pair, prompts, tmp_path, capsys, case, command):
    config, tensors, key = CASES[case]
    drafter = _copy(toy_pair, tmp_path / "drafter", config=config, tensors=tensors)
    target = ["--target", str(toy_pair.target_dir)]
    args = {"generate": ["generate", *target, "--drafter", str(drafter), "--prompts", str(prompts),
                         "--max-new-tokens", "4"],
            "probe": ["probe", *target, "--drafter", str(drafter), "--prompts", str(prompts), "--max-new-tokens", "4"],
            "train": ["train", *target, "--init", str(drafter), "--data", str(prompts), "--max-steps", "1",
                      "--out", str(tmp_path / "out")]}[command]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and key in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()
