"""check's findings from the corrected release table (issue 39 part 2): SGLang's Qwen3.5 targets and
vLLM 0.30's d2t, each with the release it starts at."""

from __future__ import annotations

import json
from pathlib import Path

from builders import make_pair, stored_tensor_bytes
from safetensors import safe_open

from draftlab.checkpoint.configs import DrafterConfig
from draftlab.checkpoint.synth import drafter_specs, vocab_mapping, write_safetensors
from draftlab.cli import main
from draftlab.compat import check_pair, fix_pair


def _found(drafter: Path, target: Path, engine: str, version: str | None, code: str) -> list:
    return [f for f in check_pair(drafter, target, engine, version).findings if f.code == code]


def test_qwen3_5_target_is_an_error_on_sglang_0_5_21_not_on_0_5_22(tmp_path, target_configs):
    qwen3_5 = {**target_configs["llama"], "model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"]}
    drafter, target = make_pair(tmp_path, qwen3_5)
    [error] = _found(drafter, target, "sglang", "0.5.21", "target-unserved")
    assert error.severity == "error" and "0.5.21" in error.message and ">= 0.5.22" in error.fix
    assert not check_pair(drafter, target, "sglang", "0.5.21").ok
    assert _found(drafter, target, "sglang", "0.5.22", "target-unserved") == []
    assert _found(drafter, target, "vllm", None, "target-unserved") == []
    assert _found(*make_pair(tmp_path / "llama", target_configs["llama"]), "sglang", "0.5.21", "target-unserved") == []


def _full_vocab(drafter: Path, vocab: int) -> None:
    """The drafter rewritten over the target's whole vocabulary, shipping the identity d2t and an all-true t2d."""
    config = {**json.loads((drafter / "config.json").read_text()), "draft_vocab_size": vocab}
    (drafter / "config.json").write_text(json.dumps(config))
    d2t, t2d = vocab_mapping(range(vocab), vocab)
    specs = {**drafter_specs(DrafterConfig.from_dict(config)), "d2t": ("I64", (vocab,)), "t2d": ("BOOL", (vocab,))}
    write_safetensors(drafter / "model.safetensors", specs, values={"d2t": d2t, "t2d": t2d})


def test_full_vocab_drafter_with_d2t_is_an_error_on_vllm_0_30_and_fix_drops_it(tmp_path, target_configs):
    """llama_eagle3.py 0.30.0 creates draft_id_to_target_id only when draft_vocab_size != the target's vocabulary,
    and AutoWeightsLoader raises on a weight with no parameter; 0.29.0 always creates it."""
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    _full_vocab(drafter, 512)
    [error] = _found(drafter, target, "vllm", "0.30.0", "d2t-full-vocab")
    assert error.severity == "error" and error.fixable and error.field == "d2t" and "vLLM 0.30.0" in error.message
    assert _found(drafter, target, "vllm", "0.31.0", "d2t-full-vocab")  # and every later release
    assert _found(drafter, target, "vllm", "0.29.0", "d2t-full-vocab") == []
    assert _found(drafter, target, "sglang", None, "d2t-full-vocab") == []

    fixed = fix_pair(drafter, target, tmp_path / "fixed", "vllm", engine_version="0.30.0")
    assert "d2t-full-vocab" in {f.code for f in fixed.fixed} and fixed.after.ok
    before, after = stored_tensor_bytes(drafter), stored_tensor_bytes(fixed.out)
    assert set(before) - set(after) == {"d2t", "t2d"}
    assert all(after[name] == data for name, data in before.items() if name in after)  # bit for bit
    with safe_open(str(fixed.out / "model.safetensors"), "pt") as f:  # one safetensors itself accepts
        assert set(f.keys()) == set(after)
    assert (drafter / "model.safetensors").exists() and "d2t" in stored_tensor_bytes(drafter)  # original untouched


def test_pruned_vocab_drafter_keeps_its_d2t_on_vllm_0_30(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])  # draft vocabulary 128 of 512
    assert _found(drafter, target, "vllm", "0.30.0", "d2t-full-vocab") == []


def test_empty_engine_version_is_refused_in_one_line(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    assert main(["check", str(drafter), "-t", str(target), "-e", "vllm", "--engine-version", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--engine-version is empty" in err[0]


def test_a_post_release_is_checked_with_its_base_rules(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    assert check_pair(drafter, target, "sglang", "0.5.13.post1").engine_version == "0.5.13"
    assert main(["check", str(drafter), "-t", str(target), "-e", "vllm", "--engine-version", "0.30.0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine_version"] == "0.30.0"
