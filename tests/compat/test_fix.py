"""check --fix: the fixed drafter passes, the input is untouched, tensors are bit-identical."""

from __future__ import annotations

import json

import pytest
from builders import DROP, SEEN_AUX, as_speculators, folder_hash, make_pair, stored_tensor_bytes

from draftlab.cli import main
from draftlab.compat import check_pair, fix_pair

BROKEN = dict(max_position_embeddings=1024, architectures=["Eagle3LlamaForCausalLM"], eagle_config=DROP,
              rope_theta=1e6, eos_token_id=9)


@pytest.mark.parametrize("family", ["llama", "qwen3_moe"])
def test_fix_round_trip_sglang(tmp_path, target_configs, family):
    drafter, target = make_pair(tmp_path, target_configs[family], layer_prefix="layers.0.", **BROKEN)
    before_hash, before_bytes = folder_hash(drafter), stored_tensor_bytes(drafter)
    result = fix_pair(drafter, target, tmp_path / "fixed", "sglang")
    assert {f.code for f in result.fixed} >= {"context-too-short", "architecture-unknown", "aux-convention",
                                              "weight-names", "rope-theta", "token-ids"}
    assert folder_hash(drafter) == before_hash
    assert result.after.ok and result.after.fixable == [] and result.after.aux_layers == SEEN_AUX
    assert check_pair(tmp_path / "fixed", target, "vllm").aux_layers == SEEN_AUX  # both engines agree now
    after_bytes = stored_tensor_bytes(tmp_path / "fixed")
    assert {result.renamed.get(k, k): v for k, v in before_bytes.items()} == after_bytes
    assert all(k.startswith("midlayer.") for k in result.renamed.values()) and len(result.renamed) == 10
    assert '-  "max_position_embeddings": 1024' in result.config_diff


def test_fix_without_renames_links_weights_and_keeps_other_files(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], max_position_embeddings=1024)
    (drafter / "tokenizer.json").write_text("{}")
    result = fix_pair(drafter, target, tmp_path / "fixed", "vllm")
    assert result.renamed == {} and result.after.findings == []
    assert (tmp_path / "fixed" / "model.safetensors").read_bytes() == (drafter / "model.safetensors").read_bytes()
    assert (tmp_path / "fixed" / "tokenizer.json").exists()


def test_speculators_layout_flattened_for_sglang(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], layer_prefix="layers.0.")
    flat = json.loads((drafter / "config.json").read_text())
    layer = {k: flat.pop(k) for k in list(flat) if k not in ("draft_vocab_size", "eagle_aux_hidden_state_layer_ids",
                                                            "eagle_config", "torch_dtype")}
    flat.pop("eagle_config")
    spec = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "norm_before_residual": False,
            "speculators_config": {"algorithm": "eagle3"}, "transformer_layer_config": layer, **flat}
    (drafter / "config.json").write_text(json.dumps(spec))
    assert check_pair(drafter, target, "vllm").findings == []
    before = check_pair(drafter, target, "sglang")
    assert {"architecture-unknown", "weight-names"} <= {f.code for f in before.findings}
    result = fix_pair(drafter, target, tmp_path / "fixed", "sglang")
    config = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert "transformer_layer_config" not in config and config["hidden_size"] == 64
    assert result.after.findings == [] and result.after.aux_layers == SEEN_AUX


def test_unfixable_error_stays_and_exit_code_is_1(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"], vocab_size=1000, max_position_embeddings=1024)
    code = main(["check", str(drafter), "--target", str(target), "--fix", str(tmp_path / "fixed"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    after = doc["after"]["findings"]
    assert "vocab-size" in {f["code"] for f in after} and not any(f["fixable"] for f in after)
    assert "context-too-short" not in {f["code"] for f in after}


def test_fix_refuses_existing_output_and_writes_nothing_on_bad_input(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    (tmp_path / "exists").mkdir()
    assert main(["check", str(drafter), "-t", str(target), "--fix", str(tmp_path / "exists")]) == 2
    (drafter / "config.json").write_text("{not json")
    assert main(["check", str(drafter), "-t", str(target), "--fix", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "invalid JSON" in err[1]


def test_check_cli_exit_codes_and_json(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    assert main(["check", str(drafter), "--target", str(target), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["findings"] == []
    (drafter / "config.json").write_text(json.dumps({**json.loads((drafter / "config.json").read_text()),
                                                     "max_position_embeddings": 512}))
    assert main(["check", str(drafter), "--target", str(target), "--engine", "vllm", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert set(doc["findings"][0]) >= {"code", "severity", "field", "message", "fix", "fixable"}
    assert doc["findings"][0]["field"] == "max_position_embeddings"
    assert main(["check", str(target), "--target", str(drafter)]) == 2  # swapped
    assert main(["check", str(drafter), "--target", str(target), "--engine", "trtllm"]) == 2


def test_flattened_speculators_config_builds_in_sglang_and_specforge(tmp_path, target_configs):
    """speculators writes target_hidden_size null (SGLang/SpecForge compute None * 3) and norm_output false
    (SpecForge would skip the final norm): neither may reach the flat config."""
    drafter, target = make_pair(tmp_path, target_configs["llama"], layer_prefix="layers.0.", eagle_config=DROP)
    as_speculators(drafter)
    fix_pair(drafter, target, tmp_path / "fixed", "sglang")
    config = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert "transformer_layer_config" not in config
    assert "target_hidden_size" not in config  # equal to hidden_size: absent, never null
    assert "norm_output" not in config


def test_fix_sets_target_hidden_size_from_the_target_when_it_differs(tmp_path, target_configs):
    """A drafter narrower than its target: SGLang sizes fc from target_hidden_size, so a null must become the target's."""
    drafter, target = make_pair(tmp_path, target_configs["llama"], layer_prefix="layers.0.", eagle_config=DROP,
                                hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                intermediate_size=64, target_hidden_size=64)
    as_speculators(drafter)
    fix_pair(drafter, target, tmp_path / "fixed", "sglang")
    config = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert config["hidden_size"] == 32 and config["target_hidden_size"] == 64


def test_check_flags_a_null_that_sglang_and_specforge_cannot_build_and_fix_removes_it(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], target_hidden_size=None, norm_output=None)
    for engine in ("sglang", "vllm"):  # both size fc from target_hidden_size when the key exists
        found = {f.code: f for f in check_pair(drafter, target, engine).findings}
        assert found["config-null"].severity == "error"
        assert "target_hidden_size and norm_output to null" in found["config-null"].message
    result = fix_pair(drafter, target, tmp_path / "fixed", "sglang")
    assert "config-null" in {f.code for f in result.fixed} and result.after.findings == []


def test_check_warns_when_specforge_would_skip_the_final_norm(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], norm_output=False)
    found = {f.code: f for f in check_pair(drafter, target, "sglang").findings}
    assert found["norm-output"].severity == "warning" and not found["norm-output"].fixable
