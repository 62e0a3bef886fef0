"""Tiny random target models of every family the runner supports, built from transformers configs."""

from __future__ import annotations

import torch
import transformers as tf

COMMON = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=5,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)

FAMILIES: dict[str, tuple[type, dict]] = {
    "llama": (tf.LlamaConfig, {}),
    "qwen2": (tf.Qwen2Config, {}),
    "qwen3": (tf.Qwen3Config, {"head_dim": 8}),
    "qwen3_moe": (tf.Qwen3MoeConfig, {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                                      "head_dim": 8}),
    # a window shorter than the test sequences, so the sliding mask is exercised
    "mistral": (tf.MistralConfig, {"sliding_window": 6}),
    "deepseek_v3": (tf.DeepseekV3Config, {"kv_lora_rank": 16, "q_lora_rank": 24, "qk_rope_head_dim": 8,
                                          "qk_nope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4,
                                          "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                                          "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1,
                                          "topk_group": 1, "num_key_value_heads": 4}),
    "gpt_oss": (tf.GptOssConfig, {"num_local_experts": 4, "max_position_embeddings": 131072, "num_experts_per_tok": 2, "head_dim": 8,
                                  "sliding_window": 6, "layer_types": ["sliding_attention", "full_attention"] * 2
                                  + ["sliding_attention"]}),
}


def tiny_target(family: str, *, seed: int = 0, attn: str | None = None) -> tf.PreTrainedModel:
    config_cls, extra = FAMILIES[family]
    config = config_cls(**{**COMMON, **extra})
    if attn is not None:
        config._attn_implementation = attn
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval()
