"""Each check rule: a case that triggers it, and the clean pair that triggers none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import DROP, SEEN_AUX, TINY_TARGETS, make_pair

from draftlab.checkpoint.configs import DrafterConfig
from draftlab.checkpoint.synth import drafter_specs, write_safetensors
from draftlab.compat import check_pair, fix_pair


def codes(drafter: Path, target: Path, engine: str = "sglang", version: str | None = None) -> set[str]:
    return {f.code for f in check_pair(drafter, target, engine, version).findings}


@pytest.mark.parametrize("family", TINY_TARGETS)
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_clean_pair_has_no_findings(tmp_path, target_configs, family, engine):
    drafter, target = make_pair(tmp_path, target_configs[family])
    result = check_pair(drafter, target, engine)
    allowed = {"rope-theta", "rope-scaling", "target-unsupported"} if family == "deepseek_v3" else set()
    assert {f.code for f in result.findings} <= allowed
    assert all(f.severity == "info" for f in result.findings if f.code.startswith("rope"))
    assert result.ok and result.aux_layers == SEEN_AUX


def _rewrite_config(drafter: Path, **fields) -> None:
    path = drafter / "config.json"
    config = json.loads(path.read_text())
    config.update(fields)
    path.write_text(json.dumps(config))


# (code, engine, drafter config overrides); the target is the tiny Llama.
CONFIG_CASES = [
    ("context-too-short", "sglang", {"max_position_embeddings": 2048}),
    ("context-too-short", "vllm", {"max_position_embeddings": 2048}),
    ("rope-theta", "sglang", {"rope_theta": 1e6}),
    ("rope-scaling", "vllm", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}),
    ("vocab-size", "sglang", {"vocab_size": 1024}),
    ("architecture-unknown", "sglang", {"architectures": ["Eagle3LlamaForCausalLM"]}),
    ("architecture-unknown", "vllm", {"architectures": ["LlamaForCausalLM"]}),
    ("num-layers", "sglang", {"num_hidden_layers": 2}),
    ("norm-before-residual", "sglang", {"norm_before_residual": True}),
    ("token-ids", "sglang", {"eos_token_id": 7}),
    ("dtype-mismatch", "sglang", {}),  # weights written in float32 below
    ("aux-convention", "sglang", {"eagle_config": DROP}),  # only vLLM's field: SGLang uses the default
    ("aux-convention", "vllm", {"eagle_aux_hidden_state_layer_ids": DROP}),
    # SGLang's ids copied unchanged to vLLM's field (as a speculators conversion once did): off by one.
    ("aux-convention", "vllm", {"eagle_aux_hidden_state_layer_ids": SEEN_AUX}),
    ("aux-other-engine", "sglang", {"eagle_aux_hidden_state_layer_ids": DROP}),
    ("aux-default", "sglang", {"eagle_config": DROP, "eagle_aux_hidden_state_layer_ids": DROP}),
    ("aux-out-of-range", "sglang", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 7]},
                                    "eagle_aux_hidden_state_layer_ids": [2, 4, 8]}),
    ("aux-duplicate", "vllm", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 3]},
                               "eagle_aux_hidden_state_layer_ids": [2, 4, 4]}),
    ("aux-shifted", "sglang", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 4, 5]},
                               "eagle_aux_hidden_state_layer_ids": [3, 5, 6]}),
    ("target-hidden-size", "sglang", {"target_hidden_size": 64}),  # written below with fc for 32
]


@pytest.mark.parametrize(("code", "engine", "fields"), CONFIG_CASES, ids=lambda v: v if isinstance(v, str) else "")
def test_rule_triggers(tmp_path, target_configs, code, engine, fields):
    drafter, target = make_pair(tmp_path, target_configs["llama"], **fields)
    if code == "dtype-mismatch":
        d = DrafterConfig.from_dict(json.loads((drafter / "config.json").read_text()))
        write_safetensors(drafter / "model.safetensors", drafter_specs(d, dtype="float32"))
    if code == "target-hidden-size":
        _rewrite_config(drafter, target_hidden_size=32)
    found = codes(drafter, target, engine)
    assert code in found, found


def test_target_hidden_size_is_fixable_only_when_fc_fits(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    _rewrite_config(drafter, target_hidden_size=32)  # config typo: fc is still 3 x 64
    [finding] = [f for f in check_pair(drafter, target).findings if f.code == "target-hidden-size"]
    assert finding.fixable and finding.severity == "error"


def test_aux_shifted_kimi_style_is_a_warning_not_an_error(tmp_path, target_configs):
    # EAGLE's default input ids [2, L//2, L-3] written into SGLang's field, as AQ-MedAI's Kimi-K2 drafter does.
    drafter, target = make_pair(tmp_path, target_configs["llama"],
                                eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 5]},
                                eagle_aux_hidden_state_layer_ids=[3, 5, 6])
    result = check_pair(drafter, target, "sglang")
    assert result.ok and result.aux_layers == [2, 4, 5]
    assert [f.severity for f in result.findings if f.code == "aux-shifted"] == ["warning"]


def test_weight_names_dropped_by_sglang_but_bound_by_vllm(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], layer_prefix="layers.0.")
    sglang = [f for f in check_pair(drafter, target, "sglang").findings if f.code == "weight-names"]
    assert len(sglang) == 1 and sglang[0].fixable and "dropped silently" in sglang[0].message
    assert "weight-names" not in codes(drafter, target, "vllm")


def test_embed_tokens_replaced_in_sglang_only(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], embed=True)
    assert "embed-replaced" in codes(drafter, target, "sglang")
    assert "embed-replaced" not in codes(drafter, target, "vllm")


def test_vllm_flags_targets_outside_its_allow_list(tmp_path, target_configs):
    # The allow-list (vllm #31254) predates 0.18.0, whose MLA drafter serves DeepSeek/Kimi targets.
    drafter, target = make_pair(tmp_path, target_configs["deepseek_v3"])
    assert "target-unsupported" in codes(drafter, target, "vllm", "0.17.1")
    assert "target-unsupported" not in codes(drafter, target, "vllm", "0.18.0")
    assert "target-unsupported" not in codes(drafter, target, "sglang")


def test_a_stray_safetensors_beside_a_single_file_checkpoint_is_an_error(tmp_path, target_configs):
    """Without an index SGLang and vLLM load every *.safetensors of the folder; one no index names is loaded too."""
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    assert "stray-weights" not in codes(drafter, target)
    (drafter / "old-epoch.safetensors").write_bytes((drafter / "model.safetensors").read_bytes())
    for engine in ("sglang", "vllm"):
        result = check_pair(drafter, target, engine)
        found = [f for f in result.findings if f.code == "stray-weights"]
        assert not result.ok and len(found) == 1 and found[0].severity == "error" and found[0].fixable
        assert found[0].field == "old-epoch.safetensors" and "move old-epoch.safetensors" in found[0].fix
    fixed = fix_pair(drafter, target, tmp_path / "fixed", "sglang")  # the stray file stays behind
    assert not (tmp_path / "fixed" / "old-epoch.safetensors").exists() and fixed.after.ok
    assert (drafter / "old-epoch.safetensors").exists()
    from draftlab.checkpoint import open_checkpoint

    names = list(open_checkpoint(drafter / "model.safetensors").tensors)
    (drafter / "model.safetensors.index.json").write_text(  # an index names what is loaded: nothing is stray
        json.dumps({"weight_map": dict.fromkeys(names, "model.safetensors")}))
    assert "stray-weights" not in codes(drafter, target)
