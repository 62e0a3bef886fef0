"""Grouped-query attention of the Llama EAGLE-3 drafters (SGLang's and vLLM's ``llama_eagle3``), one
attention kind of :mod:`draftlab.models.attention`: q/k/v projections of the layer input, Llama's RoPE
over the whole head, ``o_proj`` back to the hidden size. Qwen3-architecture drafters (speculators'
``--draft-arch qwen3``, vLLM's ``qwen3_eagle3``) add Qwen3's per-head ``q_norm``/``k_norm``: an RMSNorm
over each head's query and key before RoPE, as transformers' ``Qwen3Attention`` computes it."""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from draftlab.checkpoint import DrafterConfig
from draftlab.models.attention import KV, CosSin, Preallocated, attend


class GqaAttention(nn.Module):
    """Grouped-query attention with the drafter attention interface; the caches hold ``kv_heads`` x
    ``head_dim`` keys and values."""

    scale: float | None = None  # SDPA's default 1 / sqrt(head_dim)

    def __init__(self, in_size: int, cfg: DrafterConfig, bias: bool) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(in_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(in_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(in_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=bias)
        qwen3 = cfg.layer_kind == "qwen3"  # Qwen3RMSNorm computes what LlamaRMSNorm does
        self.q_norm = LlamaRMSNorm(self.head_dim, cfg.rms_norm_eps) if qwen3 else None
        self.k_norm = LlamaRMSNorm(self.head_dim, cfg.rms_norm_eps) if qwen3 else None

    def project(self, x: torch.Tensor, rope: CosSin) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, n, in] -> q [B, heads, n, D], k and v [B, kv_heads, n, D]."""
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), *rope)
        return q, k, v

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """The attention result [B, heads, n, D] -> [B, n, hidden]."""
        b, _, n, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))

    def forward(self, x: torch.Tensor, rope: CosSin, past: KV | Preallocated | None, mask: torch.Tensor,
                layer: int = 0) -> tuple[torch.Tensor, KV]:
        return attend(self, x, rope, past, mask, layer)
