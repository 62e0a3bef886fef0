"""Multi-head latent attention (MLA) of the EAGLE-3 drafters for DeepSeek-V3 / Kimi-K2.x targets
(``Eagle3DeepseekV2ForCausalLM``), computed as vLLM's ``deepseek_eagle3`` and SGLang's
``kimi_k25_eagle3`` serve it.

For the layer input x (the 2H concat of the embedding and hidden branches):

    q       = q_b_proj(q_a_layernorm(q_a_proj(x)))       or q_proj(x) with no q_lora_rank; [heads, nope + rope]
    c, k_pe = split(kv_a_proj_with_mqa(x), [kv_lora_rank, rope])     k_pe: one rope key shared by every head
    k_nope, v = split(kv_b_proj(kv_a_layernorm(c)), [nope, v_head_dim])   per head
    q_pe, k_pe get DeepSeek's RoPE: interleaved pairs (x0, x1), (x2, x3), ... over the rope dims only,
        with YaRN from the drafter's own rope_scaling (transformers' DeepSeek-V3 rotary supplies cos/sin)
    attention over keys [k_nope, k_pe] with softmax scale mscale(factor, mscale_all_dim)^2 / sqrt(nope + rope)
    out     = o_proj(heads x v_head_dim)

Only the down-projections (``q_a_proj`` or ``q_proj``, ``kv_a_proj_with_mqa``) take the 2H input; the
norms inside use the config's ``rms_norm_eps`` as both engines do (transformers' DeepSeek-V3 uses 1e-6).

The drafter's caches hold one key and one value width per head, so keys are [heads, nope + rope] and
values are zero-padded to the same width (:attr:`MlaAttention.head_dim`; sliced off again in
:meth:`MlaAttention.output`). That keeps :class:`~draftlab.models.static_kv.StaticKV`,
:class:`~draftlab.models.static_kv.BatchKV`, the CUDA graphs and TTT unchanged; the engines cache the
compressed latent instead, which is the same function.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from draftlab.checkpoint import DrafterConfig
from draftlab.checkpoint.variants import MLA_ROPE_TYPES, MlaDims
from draftlab.errors import DraftlabError
from draftlab.models.attention import KV, CosSin, Preallocated, attend

DEFAULT_THETA = 10000.0  # DeepSeek-V3's rope_theta when a config leaves it out


class MlaAttention(nn.Module):
    """MLA with the drafter attention interface (:class:`~draftlab.models.attention.DrafterAttention`): ``heads`` = ``kv_heads`` (one key per head),
    ``head_dim`` the cached width, an explicit ``scale``, :meth:`project` and :meth:`output`."""

    def __init__(self, in_size: int, cfg: DrafterConfig) -> None:
        super().__init__()
        dims = _dims(cfg)
        self.dims = dims
        self.heads = self.kv_heads = cfg.num_attention_heads
        self.head_dim = max(dims.qk_head_dim, dims.v_head_dim)
        self.scale = softmax_scale(cfg)
        heads, eps = self.heads, cfg.rms_norm_eps
        if dims.q_lora_rank is None:
            self.q_proj = nn.Linear(in_size, heads * dims.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(in_size, dims.q_lora_rank, bias=False)
            self.q_a_layernorm = LlamaRMSNorm(dims.q_lora_rank, eps)
            self.q_b_proj = nn.Linear(dims.q_lora_rank, heads * dims.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(in_size, dims.kv_lora_rank + dims.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = LlamaRMSNorm(dims.kv_lora_rank, eps)
        self.kv_b_proj = nn.Linear(dims.kv_lora_rank, heads * (dims.qk_nope_head_dim + dims.v_head_dim), bias=False)
        self.o_proj = nn.Linear(heads * dims.v_head_dim, cfg.hidden_size, bias=False)

    def project(self, x: torch.Tensor, rope: CosSin
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, n, in] -> q, k, v [B, heads, n, head_dim] (q/k zero-padded past nope + rope, v past v_head_dim)."""
        b, n, _ = x.shape
        d, heads = self.dims, self.heads
        q = self.q_proj(x) if d.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q_nope, q_pe = q.view(b, n, heads, d.qk_head_dim).transpose(1, 2).split(
            [d.qk_nope_head_dim, d.qk_rope_head_dim], dim=-1)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([d.kv_lora_rank, d.qk_rope_head_dim], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(b, n, heads, d.qk_nope_head_dim + d.v_head_dim)
        k_nope, v = kv.transpose(1, 2).split([d.qk_nope_head_dim, d.v_head_dim], dim=-1)
        cos, sin = rope
        q_pe = rotate_interleaved(q_pe, cos, sin)
        k_pe = rotate_interleaved(k_pe[:, None], cos, sin).expand(b, heads, n, d.qk_rope_head_dim)
        q, k = torch.cat([q_nope, q_pe], dim=-1), torch.cat([k_nope, k_pe], dim=-1)
        return self._pad(q), self._pad(k), self._pad(v)

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (0, self.head_dim - x.shape[-1])) if x.shape[-1] < self.head_dim else x

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """The attention result [B, heads, n, head_dim] -> [B, n, hidden] (the value width only)."""
        b, _, n, _ = out.shape
        return self.o_proj(out[..., :self.dims.v_head_dim].transpose(1, 2).reshape(b, n, -1))

    def forward(self, x: torch.Tensor, rope: CosSin, past: KV | Preallocated | None,
                mask: torch.Tensor, layer: int = 0) -> tuple[torch.Tensor, KV]:
        return attend(self, x, rope, past, mask, layer)


def rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """DeepSeek's RoPE (vLLM's ``is_neox_style=False``): pair (x[2i], x[2i+1]) turns by angle i.
    x [B, h, n, rope]; cos/sin [B, n, rope] as transformers' rotary returns them (angles repeated
    twice), of which the first half is used."""
    half = x.shape[-1] // 2
    c, s = cos[:, None, :, :half], sin[:, None, :, :half]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * c - odd * s, odd * c + even * s], dim=-1).flatten(-2)


def yarn_mscale(factor: float, mscale: float) -> float:
    """YaRN's attention magnitude correction (DeepSeek's ``yarn_get_mscale``)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def softmax_scale(cfg: DrafterConfig) -> float:
    """1 / sqrt(nope + rope), times mscale(factor, mscale_all_dim)^2 under a scaled RoPE (vLLM's and
    SGLang's MLA; the rotary's own attention factor already scales cos/sin)."""
    dims = _dims(cfg)
    scale = dims.qk_head_dim ** -0.5
    scaling = cfg.rope.scaling or {}
    if scaling.get("rope_type", "default") != "default" and scaling.get("mscale_all_dim"):
        mscale = yarn_mscale(float(scaling["factor"]), float(scaling["mscale_all_dim"]))
        scale *= mscale * mscale
    return scale


def deepseek_rotary(cfg: DrafterConfig) -> nn.Module:
    """transformers' DeepSeek-V3 rotary over the rope dims, with the drafter config's RoPE (YaRN and its
    attention factor included). Called with (x, positions [B, n]) it returns cos, sin [B, n, rope]."""
    dims = _dims(cfg)
    scaling = cfg.rope.scaling or {"rope_type": "default"}
    if scaling["rope_type"] not in MLA_ROPE_TYPES:  # inspect and check name it first (checkpoint.variants)
        raise DraftlabError(f"rope_scaling type {scaling['rope_type']!r} in an MLA drafter; the engines serve "
                            "MLA drafters with plain RoPE or DeepSeek's YaRN only")
    config = DeepseekV3Config(
        hidden_size=cfg.hidden_size, num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_attention_heads, q_lora_rank=dims.q_lora_rank, kv_lora_rank=dims.kv_lora_rank,
        qk_nope_head_dim=dims.qk_nope_head_dim, qk_rope_head_dim=dims.qk_rope_head_dim,
        v_head_dim=dims.v_head_dim, max_position_embeddings=cfg.max_position_embeddings or 4096,
        rope_parameters={**scaling, "rope_theta": cfg.rope.theta or DEFAULT_THETA})
    return DeepseekV3RotaryEmbedding(config)


def _dims(cfg: DrafterConfig) -> MlaDims:
    if cfg.variant.mla is None:
        raise DraftlabError("the drafter config has no MLA dimensions (kv_lora_rank, qk_nope_head_dim, ...)")
    return cfg.variant.mla
