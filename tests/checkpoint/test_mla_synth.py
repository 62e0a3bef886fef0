"""MLA drafters (``Eagle3DeepseekV2ForCausalLM``) written by synth: Kimi-K2.x shapes over sparse files,
and a small one that loads into the drafter."""

from __future__ import annotations

from builders import tiny_target_config

from draftlab.checkpoint import DrafterConfig, open_checkpoint
from draftlab.checkpoint.synth import drafter_specs, mla_drafter_config, write_drafter, write_target
from draftlab.checkpoint.variants import read_variant, unsupported
from draftlab.compat.summary import inspect_checkpoint
from draftlab.models.drafter import Eagle3Drafter

# TorchSpec's configs/draft_models/kimi_k25_eagle3_mla.json (reference/drafter-variants.md section 4a)
K2_TEMPLATE = {
    "architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
    "intermediate_size": 18432, "num_hidden_layers": 1, "num_attention_heads": 64, "num_key_value_heads": 64,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "rms_norm_eps": 1e-5, "vocab_size": 163840, "draft_vocab_size": 163840, "rope_theta": 50000.0,
    "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096, "beta_fast": 1.0,
                     "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
    "max_position_embeddings": 262144, "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True,
                     "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                     "use_mtp_layernorm": False},
}
# Section 4c's table, EAGLE-3.1 (fc_norm) included.
K2_SHAPES = {
    "layers.0.self_attn.q_a_proj.weight": [1536, 14336], "layers.0.self_attn.q_a_layernorm.weight": [1536],
    "layers.0.self_attn.q_b_proj.weight": [12288, 1536], "layers.0.self_attn.kv_a_proj_with_mqa.weight": [576, 14336],
    "layers.0.self_attn.kv_a_layernorm.weight": [512], "layers.0.self_attn.kv_b_proj.weight": [16384, 512],
    "layers.0.self_attn.o_proj.weight": [7168, 8192], "layers.0.mlp.gate_proj.weight": [18432, 7168],
    "layers.0.mlp.up_proj.weight": [18432, 7168], "layers.0.mlp.down_proj.weight": [7168, 18432],
    "layers.0.input_layernorm.weight": [7168], "layers.0.hidden_norm.weight": [7168],
    "layers.0.post_attention_layernorm.weight": [7168], "fc.weight": [7168, 21504], "norm.weight": [7168],
    "lm_head.weight": [163840, 7168], "fc_norm.0.weight": [7168], "fc_norm.1.weight": [7168],
    "fc_norm.2.weight": [7168],
}


def test_real_size_kimi_k2_mla_drafter_over_a_sparse_file(tmp_path):
    config = {**K2_TEMPLATE, "fc_norm": True, "norm_output": True}
    folder = write_drafter(tmp_path / "k2", config, layer_prefix="layers.0.", sparse=True)
    ckpt = open_checkpoint(folder)
    assert {n: list(t.shape) for n, t in ckpt.tensors.items() if n not in ("d2t", "t2d")} == K2_SHAPES
    assert unsupported(ckpt.config, ckpt.tensors) == []
    assert read_variant(config, config).name == "eagle3.1-mla"
    d = DrafterConfig.from_dict(config)
    assert (d.num_key_value_heads, d.head_dim) == (64, 192)
    result = inspect_checkpoint(folder, num_target_layers=61)
    assert result.kind == "drafter" and result.aux_source == "eagle_config" and result.d2t_valid
    assert 1.83e9 < result.num_parameters < 1.85e9  # ~1.84B without the embedding: 1.17B of it the lm_head
    assert result.size_on_disk > 2 * 1.83e9  # bf16, as a hole


def test_q_proj_without_q_lora_rank():
    d = DrafterConfig.from_dict({**K2_TEMPLATE, "q_lora_rank": None})
    specs = drafter_specs(d)
    assert specs["midlayer.self_attn.q_proj.weight"][1] == (12288, 14336)
    assert not any("q_a_proj" in n or "q_b_proj" in n for n in specs)


def test_config_for_a_deepseek_target_loads_into_the_drafter(tmp_path):
    target = tiny_target_config("deepseek_v3")
    config = mla_drafter_config(target, draft_vocab_size=64)
    assert config["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] and config["model_type"] == "deepseek_v3"
    assert (config["q_lora_rank"], config["kv_lora_rank"], config["qk_rope_head_dim"]) == (32, 16, 8)
    assert config["intermediate_size"] == 128 and "head_dim" not in config
    write_target(tmp_path / "t", target)
    folder = write_drafter(tmp_path / "d", {**config, "torch_dtype": "float32"}, embed=True)
    drafter = Eagle3Drafter.load(folder)
    assert type(drafter.midlayer.self_attn).__name__ == "MlaAttention"
    assert drafter.midlayer.self_attn.head_dim == 24  # nope 16 + rope 8, values padded from 16


def test_an_mla_rope_the_engines_do_not_serve_is_named_before_any_build(tmp_path):
    """DeepSeek's MLA layer runs plain RoPE or YaRN in both engines; a llama3-scaled one is refused by inspect's
    unsupported() (rope_parameters, transformers 5's key, read as rope_scaling is), not by a failing build."""
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    for config in ({**K2_TEMPLATE, "rope_scaling": llama3},
                   {**{k: v for k, v in K2_TEMPLATE.items() if k != "rope_scaling"},
                    "rope_parameters": {"rope_theta": 50000.0, **llama3}}):
        found = unsupported(config, [])
        assert [(u.field, u.kind) for u in found] == [("rope_scaling", "mla-dims")]
        assert "'llama3'" in found[0].message
    assert unsupported(K2_TEMPLATE, []) == []  # YaRN is served
    assert unsupported({**K2_TEMPLATE, "rope_scaling": None}, []) == []  # plain RoPE too
