"""``draftlab profile`` in-process on a tiny saved target (CPU), and its one-line errors."""

from __future__ import annotations

import json

import torch
import transformers as tf

from draftlab.cli import main
from draftlab.cost.profile import load_profile


def test_profile_target_writes_profile(tmp_path, capsys):
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(tf.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=4, vocab_size=128, max_position_embeddings=128)).save_pretrained(
        tmp_path / "target")
    out = tmp_path / "profile.json"
    code = main(["profile", "--target", str(tmp_path / "target"), "--device", "cpu",
                 "--dtype", "float32", "--verify-tokens", "1,2", "--context", "8",
                 "--warmup", "1", "--repeats", "2", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert [(p["batch_size"], p["tokens"]) for p in doc["verify"]] == [(1, 1), (1, 2)]
    assert doc["environment"]["torch"] == torch.__version__
    assert load_profile(out).verify[0].median_ms == doc["verify"][0]["median_ms"]


def test_profile_needs_something_to_time(tmp_path, capsys):
    assert main(["profile", "--out", str(tmp_path / "p.json")]) == 2
    assert "--target" in capsys.readouterr().err
    assert main(["profile", "--tp", "2", "--out", str(tmp_path / "p.json")]) == 2
    assert "--hidden-size" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()
