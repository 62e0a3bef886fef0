"""The corrected release table (issue 39 part 2), one test per row, each from the engine's own rule
(../shared/reference/engine-releases-2026-12.md, and the vLLM wheels it names)."""

from __future__ import annotations

import pytest

from draftlab.checkpoint.configs import DrafterConfig, TargetConfig
from draftlab.engines import aux_layers, capturable, default_aux_layers
from draftlab.engines.releases import first_serving, release
from draftlab.errors import DraftlabError

NESTED = [3, 15, 28]  # a SpecForge drafter's ids, only in eagle_config (SGLang's field)


def _target(model_type: str, layers: int = 32, *, experts: int | None = None,
            architecture: str = "LlamaForCausalLM") -> TargetConfig:
    config = {"model_type": model_type, "architectures": [architecture], "num_hidden_layers": layers,
              "hidden_size": 64, "vocab_size": 512, "num_attention_heads": 4,
              **({"n_routed_experts": experts} if experts else {})}
    return TargetConfig.from_dict(config)


def _nested_only() -> DrafterConfig:
    return DrafterConfig.from_dict({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64,
                                    "num_attention_heads": 4, "vocab_size": 512,
                                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": NESTED}})


# --- vLLM's default runner (config/vllm.py VllmConfig.use_v2_model_runner) -------------------------------------

def test_nested_ids_ignored_on_vllm_0_29_for_a_llama_target():
    """0.29.0 puts every target on Model Runner V2, whose eagle3_utils never reads nested ids: the default."""
    llama = _target("llama")
    seen = aux_layers("vllm", _nested_only(), 32, target=llama, version="0.29.0")
    assert seen.source == "default" and seen.layers == default_aux_layers(32)
    assert release("vllm", "0.29.0").default_runner(False) == "MRV2"
    # the V1 runner still exists in 0.29 and reads them verbatim, where a condition forces it
    forced = aux_layers("vllm", _nested_only(), 32, target=llama, version="0.29.0", runner="V1")
    assert forced.source == "eagle_config" and forced.layers == [k - 1 for k in NESTED]
    assert "EAGLE-3 with pipeline parallelism" in release("vllm", "0.29.0").v1_forced_by()
    assert "EAGLE-3 with pipeline parallelism" not in release("vllm", "0.30.0").v1_forced_by()


@pytest.mark.parametrize("version", ["0.29.0", "0.30.0", "0.31.0", "0.33.0"])
def test_every_target_defaults_to_mrv2_from_0_29(version):
    rel = release("vllm", version)
    assert rel.default_runner(True, "DeepseekV3ForCausalLM", "kimi_k2") == "MRV2"
    assert rel.default_runner(False) == "MRV2"


def test_deepseek_v3_and_kimi_k2_stay_on_v1_through_0_28():
    kimi = _target("kimi_k2", 61, experts=8, architecture="DeepseekV3ForCausalLM")
    for version in ("0.22.0", "0.25.0", "0.27.0", "0.28.0"):
        seen = aux_layers("vllm", _nested_only(), 61, target=kimi, version=version)
        assert seen.source == "eagle_config" and seen.layers == [k - 1 for k in NESTED], version
    assert aux_layers("vllm", _nested_only(), 61, target=kimi, version="0.29.0").source == "default"
    # 0.28's DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES: listed MoE targets get MRV2, unlisted ones V1
    assert release("vllm", "0.28.0").default_runner(True, "Qwen2MoeForCausalLM") == "MRV2"
    assert release("vllm", "0.28.0").default_runner(True, "Qwen3MoeForCausalLM") == "V1"


# --- the final boundary (EagleModelMixin, model_executor/models/interfaces.py) ----------------------------------

def test_id_n_capturable_for_a_qwen3_target_on_vllm_0_18():
    qwen3 = _target("qwen3", 36, architecture="Qwen3ForCausalLM")
    assert capturable(36, "vllm", target=qwen3, version="0.18.0").stop == 36
    assert capturable(36, "vllm", target=qwen3, version="0.17.1").stop == 35  # "before layer idx" only
    last = DrafterConfig.from_dict({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64,
                                    "num_attention_heads": 4, "vocab_size": 512,
                                    "eagle_aux_hidden_state_layer_ids": [2, 18, 36]})
    assert aux_layers("vllm", last, 36, target=qwen3, version="0.18.0").layers == [1, 17, 35]


@pytest.mark.parametrize(("model_type", "first", "before"), [
    ("llama", "0.18.0", "0.17.1"), ("qwen2", "0.18.0", "0.17.1"), ("qwen3_moe", "0.18.0", "0.17.1"),
    ("gpt_oss", "0.18.0", "0.17.1"),
    # qwen3_next.py, minimax_m2.py, gemma4.py append idx + 1 in the 0.20.0 wheel already
    ("qwen3_next", "0.20.0", "0.19.0"), ("minimax_m2", "0.20.0", "0.19.0"), ("gemma4_text", "0.20.0", "0.19.0"),
    ("deepseek_v3", "0.25.0", "0.24.0"),  # deepseek_v2.py's end_layer
])
def test_final_boundary_per_family(model_type, first, before):
    assert release("vllm", first).captures_final_boundary(model_type)
    assert not release("vllm", before).captures_final_boundary(model_type)


def test_sglang_captures_no_final_boundary_but_gpt_oss():
    assert not release("sglang", "0.5.23").captures_final_boundary("qwen3")
    assert release("sglang", "0.5.17").captures_final_boundary("gpt_oss")


# --- version resolution -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("engine", "asked", "rules"), [
    ("sglang", "0.5.13.post1", "0.5.13"),  # byte-identical set_eagle3_layers_to_capture
    ("sglang", "0.5.15.post1", "0.5.15"),
    ("sglang", "0.5.18", "0.5.17"),
    ("sglang", "0.5.20", "0.5.19"),
    ("sglang", "0.5.10.post1", "0.5.10"),
    ("sglang", "0.5.12.post1", "0.5.12.post1"),
    ("vllm", "0.30.0", "0.30.0"),
    ("vllm", "0.30.1", "0.30.0"),
    ("vllm", "0.32.0", "0.31.0"),
    ("vllm", "0.22.1", "0.22.0"),
    ("vllm", "0.25.1", "0.25.0"),
    ("vllm", "0.20.2", "0.20.0"),
    ("vllm", "0.30.0rc1", "0.29.0"),  # a pre-release comes before its release
])
def test_any_version_resolves_to_the_newest_known_at_or_below_it(engine, asked, rules):
    assert release(engine, asked).version == rules


def test_0_5_13_post1_has_the_0_5_13_rules():
    post = release("sglang", "0.5.13.post1")
    assert post.deepseek_first_id_rule and not post.gpt_oss_boundary_rule
    assert post == release("sglang", "0.5.13")


def test_0_30_0_has_its_own_d2t_rule():
    assert release("vllm", "0.30.0").d2t_needs_pruned_vocab
    assert not release("vllm", "0.29.0").d2t_needs_pruned_vocab


def test_a_newer_version_gets_the_newest_rules_with_one_warning(capsys):
    assert release("vllm", "0.97.0").version == "0.34.0"
    assert release("vllm", "0.97.0").version == "0.34.0"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vLLM 0.97.0 is newer" in err[0] and "0.34.0" in err[0]


@pytest.mark.parametrize(("engine", "asked", "says"), [
    ("vllm", "0.17.0", "before 0.17.1"),
    ("sglang", "0.5.9", "before 0.5.10"),
    ("vllm", "", "is empty"),
    ("vllm", "  ", "is empty"),
    ("sglang", "latest", "not a version number"),
])
def test_older_empty_or_malformed_versions_are_refused_in_one_line(engine, asked, says):
    with pytest.raises(DraftlabError, match=says) as caught:
        release(engine, asked)
    assert "\n" not in str(caught.value)


# --- SGLang and Qwen3.5/3.6 targets (models/qwen3_5.py, sglang PR #38307) -----------------------------------------

@pytest.mark.parametrize("model_type", ["qwen3_5_text", "qwen3_5_moe_text", "qwen3_5"])
def test_qwen3_5_target_unsupported_on_sglang_0_5_21_supported_on_0_5_22(model_type):
    assert not release("sglang", "0.5.21").serves_target(model_type)
    assert release("sglang", "0.5.22").serves_target(model_type)
    assert release("sglang", "0.5.21").serves_target("qwen3") and release("vllm", "0.18.0").serves_target(model_type)
    assert first_serving("sglang", model_type) == "0.5.22"
