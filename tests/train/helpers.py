"""A tiny random EAGLE-3 drafter and a batch of random target outputs for TTT tests."""

from __future__ import annotations

import math

import torch

from draftlab.checkpoint import DrafterConfig
from draftlab.models.drafter import Eagle3Drafter

H, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, DRAFT_VOCAB = 32, 4, 2, 8, 48, 97, 40


def drafter_config(**fields) -> dict:
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
            "intermediate_size": INTER, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
            "head_dim": HEAD_DIM, "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "hidden_act": "silu", "max_position_embeddings": 512, "vocab_size": VOCAB,
            "draft_vocab_size": DRAFT_VOCAB, "target_hidden_size": H, "tie_word_embeddings": False, **fields}


# An MLA drafter (DeepSeek/Kimi) of the same width, with YaRN so the softmax scale is not 1/sqrt(d).
MLA_FIELDS = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "num_key_value_heads": HEADS,
              "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12,
              "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                               "mscale": 1.0, "mscale_all_dim": 1.0}}


def tiny_drafter(seed: int = 0, config: DrafterConfig | None = None, **fields) -> tuple[Eagle3Drafter, torch.Tensor]:
    """A random drafter (norm weights away from 1) and its t2d; d2t names a random draft vocabulary. Its
    config is ``config``, else :func:`drafter_config` with ``fields``."""
    g = torch.Generator().manual_seed(seed)
    drafter = Eagle3Drafter(config or DrafterConfig.from_dict(drafter_config(**fields)))
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if name.endswith("norm.weight") or ".hidden_norm." in name or "layernorm" in name:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
        ids = torch.randperm(VOCAB, generator=g)[:DRAFT_VOCAB].sort().values
        drafter.d2t.copy_(ids - torch.arange(DRAFT_VOCAB))
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[ids] = True
    drafter.embed_tokens.weight.requires_grad_(False)
    return drafter, t2d


def random_rows(b: int, n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids [b, n], loss_mask [b, n], aux [b, n, 3H] and target logits [b, n, V], unshifted."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (b, n), generator=g)
    mask = (torch.rand(b, n, generator=g) < 0.8).long()
    aux = torch.randn(b, n, 3 * H, generator=g)
    logits = 3 * torch.randn(b, n, VOCAB, generator=g)
    return ids, mask, aux, logits
