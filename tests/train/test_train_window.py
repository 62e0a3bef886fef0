"""train --sliding-window W builds a drafter whose config says its window as speculators writes it; a warm
start keeps a sliding-window drafter's window and a Qwen3-architecture drafter's layer (q/k norms, config)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from draftlab.checkpoint import DrafterConfig
from draftlab.cli import main
from draftlab.models.drafter import Eagle3Drafter
from draftlab.toy.corpus import stdlib_text
from draftlab.toy.variants import WINDOW, cached_variant_drafter
from draftlab.train.trainer import TrainOptions, train


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Eight rows of 48 stdlib bytes, the first four of each unscored."""
    text = stdlib_text("train", 20_000)
    path = tmp_path_factory.mktemp("data") / "rows.jsonl"
    with path.open("w") as f:
        for start in range(0, 8 * 300, 300):
            f.write(json.dumps({"input_ids": list(text[start:start + 48]), "loss_mask": [0] * 4 + [1] * 44}) + "\n")
    return path


def _args(toy_pair, data, out) -> list[str]:
    return ["train", "--target", str(toy_pair.target_dir), "--data", str(data), "--max-steps", "2", "--batch-size",
            "4", "--seq-len", "48", "--ttt-length", "3", "--draft-vocab-size", "64", "--out", str(out), "--json"]


def test_sliding_window_from_scratch_writes_the_window(toy_pair, data, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_args(toy_pair, data, out) + ["--sliding-window", "16"]) == 0
    capsys.readouterr()
    config = json.loads((out / "config.json").read_text())
    assert (config["layer_types"], config["use_sliding_window"], config["sliding_window"]) == (
        ["sliding_attention"], True, 16)
    assert DrafterConfig.from_dict(config).layer_windows == (16,)
    assert Eagle3Drafter(DrafterConfig.from_dict(config)).windows == (16,)


def test_sliding_window_with_a_warm_start_is_a_usage_error(toy_pair, data, tmp_path, capsys):
    code = main(_args(toy_pair, data, tmp_path / "o") + ["--init", str(toy_pair.drafter_dir), "--sliding-window", "8"])
    assert code == 2 and "keeps the window of --init" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _qk_norms(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The first layer's q_norm/k_norm weights by their names after ``self_attn.`` (either layout)."""
    return {k.split("self_attn.")[1]: v for k, v in tensors.items() if k.endswith(("q_norm.weight", "k_norm.weight"))}


@pytest.mark.parametrize("name", ["sliding-window", "qwen3"])
def test_a_warm_start_keeps_the_layer(toy_pair, data, tmp_path, name):
    init = cached_variant_drafter(toy_pair, name)
    out = tmp_path / "out"
    train(TrainOptions(target=toy_pair.target_dir, out=out, data=data, max_steps=2, batch_size=4, seq_len=48,
                       lr=5e-3, ttt_length=3, init=init))
    before = DrafterConfig.from_dict(json.loads((init / "config.json").read_text()))
    after = DrafterConfig.from_dict(json.loads((out / "config.json").read_text()))
    assert (after.layer_windows, after.layer_kind) == (before.layer_windows, before.layer_kind)
    if name == "sliding-window":
        assert after.layer_windows == (WINDOW,)
    old, new = load_file(str(init / "model.safetensors")), load_file(str(out / "model.safetensors"))
    norms, old_norms = (_qk_norms(tensors) for tensors in (new, old))
    assert sorted(norms) == sorted(old_norms) == ([] if name != "qwen3" else ["k_norm.weight", "q_norm.weight"])
    assert all(not torch.equal(norms[k], old_norms[k]) for k in norms)  # trained, not copied
