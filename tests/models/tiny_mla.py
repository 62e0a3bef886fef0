"""A tiny random MLA EAGLE-3 drafter (``Eagle3DeepseekV2ForCausalLM``) and its plain reference
(:mod:`mla_reference`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from mla_reference import MlaReference
from safetensors.torch import save_file
from tiny_drafters import DRAFT_VOCAB, VOCAB, H

HEADS, INTER, THETA, EPS = 4, 48, 10000.0, 1e-5
NOPE, ROPE, V, KV_RANK, Q_RANK = 16, 8, 12, 16, 24
# YaRN with factor != 1 and mscale != mscale_all_dim: both the rotary's attention factor and the
# softmax's mscale(factor, mscale_all_dim)^2 differ from 1.
YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
        "mscale": 0.8, "mscale_all_dim": 0.6}


def mla_config(*, q_lora_rank: int | None = Q_RANK, rope_scaling: dict | None = YARN, **fields) -> dict:
    """A TorchSpec-style MLA drafter config.json (Kimi's model_type)."""
    return {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": H,
            "intermediate_size": INTER, "num_hidden_layers": 1, "num_attention_heads": HEADS,
            "num_key_value_heads": HEADS, "q_lora_rank": q_lora_rank, "kv_lora_rank": KV_RANK,
            "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE, "v_head_dim": V, "rms_norm_eps": EPS,
            "rope_theta": THETA, "rope_scaling": rope_scaling, "hidden_act": "silu", "max_position_embeddings": 512,
            "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB, "target_hidden_size": H,
            "tie_word_embeddings": False, **fields}


def mla_tensors(*, q_lora_rank: int | None = Q_RANK, seed: int = 0, fc_norm: bool = False) -> dict[str, torch.Tensor]:
    """SpecForge-named random weights (norm weights away from 1 so a skipped norm shows)."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) / math.sqrt(shape[-1])

    def norm(n: int = H) -> torch.Tensor:
        return 1 + 0.3 * torch.randn(n, generator=g)

    p = "midlayer.self_attn."
    t = {"fc.weight": w(H, 3 * H), "norm.weight": norm(), "lm_head.weight": w(DRAFT_VOCAB, H),
         "d2t": torch.arange(DRAFT_VOCAB) % 3, "embed_tokens.weight": torch.randn(VOCAB, H, generator=g),
         p + "kv_a_proj_with_mqa.weight": w(KV_RANK + ROPE, 2 * H), p + "kv_a_layernorm.weight": norm(KV_RANK),
         p + "kv_b_proj.weight": w(HEADS * (NOPE + V), KV_RANK), p + "o_proj.weight": w(H, HEADS * V),
         "midlayer.mlp.gate_proj.weight": w(INTER, H), "midlayer.mlp.up_proj.weight": w(INTER, H),
         "midlayer.mlp.down_proj.weight": w(H, INTER), "midlayer.input_layernorm.weight": norm(),
         "midlayer.hidden_norm.weight": norm(), "midlayer.post_attention_layernorm.weight": norm()}
    if q_lora_rank is None:
        t[p + "q_proj.weight"] = w(HEADS * (NOPE + ROPE), 2 * H)
    else:
        t.update({p + "q_a_proj.weight": w(q_lora_rank, 2 * H), p + "q_a_layernorm.weight": norm(q_lora_rank),
                  p + "q_b_proj.weight": w(HEADS * (NOPE + ROPE), q_lora_rank)})
    if fc_norm:
        t.update({f"fc_norm.{i}.weight": norm() for i in range(3)})
    return t


def write_mla(folder: Path, tensors: dict[str, torch.Tensor], config: dict, *, prefix: str = "midlayer.") -> Path:
    """A drafter folder; ``prefix`` "layers.0." writes TorchSpec's exported names."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k.replace("midlayer.", prefix): v.contiguous() for k, v in tensors.items()},
              str(folder / "model.safetensors"))
    return folder


def reference(t: dict[str, torch.Tensor], config: dict, ids: torch.Tensor,
              hidden: torch.Tensor | list[torch.Tensor], pos: torch.Tensor,
              allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits, pre-norm output and the next step's hidden of one sequence (:class:`MlaReference`)."""
    return MlaReference(t, config)(ids, hidden, pos, allowed)
