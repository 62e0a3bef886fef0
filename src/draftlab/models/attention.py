"""The drafter's attention interface, and the attention every kind of it shares.

Each attention kind of the drafter layer (:mod:`draftlab.models.gqa` for Llama drafters,
:mod:`draftlab.models.mla` for DeepSeek/Kimi ones) is an ``nn.Module`` offering
:class:`DrafterAttention`: it projects its input to queries, keys and values with RoPE applied, and
maps the attention result back to the hidden size. What lies between (the caches, the mask, SDPA or
the static cache's kernels) is :func:`attention`, the same for every kind; the caches hold
``kv_heads`` x ``head_dim`` keys and values.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F

from draftlab.models.static_kv import BatchKV, StaticKV, cached_attention

KV = tuple[torch.Tensor, torch.Tensor]  # keys, values: [B, kv_heads, S, head_dim]
Preallocated = StaticKV | BatchKV  # caches that write every layer's new keys/values in place
CosSin = tuple[torch.Tensor, torch.Tensor]  # cos, sin at the tokens' positions


class DrafterAttention(Protocol):
    """What an attention kind offers the drafter layer, its caches and TTT."""

    heads: int
    kv_heads: int
    head_dim: int  # the cached width of a key and a value
    scale: float | None  # the softmax scale; None: SDPA's default 1 / sqrt(head_dim)

    def project(self, x: torch.Tensor, rope: CosSin) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, n, in] -> q [B, heads, n, head_dim], k and v [B, kv_heads, n, head_dim], RoPE applied."""
        ...

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """The attention result [B, heads, n, head_dim] -> [B, n, hidden]."""
        ...


def attend(attn: DrafterAttention, x: torch.Tensor, rope: CosSin, past: KV | Preallocated | None, mask: torch.Tensor,
           layer: int = 0) -> tuple[torch.Tensor, KV]:
    """One attention module's pass: x [B, n, in] -> its output [B, n, hidden] and the new keys/values
    (:func:`attention` over ``past``)."""
    q, k, v = attn.project(x, rope)
    out, new = attention(attn, q, k, v, past, mask, layer)
    return attn.output(out), new


def attention(attn: DrafterAttention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              past: KV | Preallocated | None, mask: torch.Tensor, layer: int = 0) -> tuple[torch.Tensor, KV]:
    """Attention of the projected q [B, heads, n, D] over ``past`` and the new k, v [B, kv_heads, n, D];
    mask [B, n, S] bool over past + new keys (the slots a preallocated ``past`` returns, which this
    writes layer ``layer`` of). Returns the result [B, heads, n, D] (before ``output``) and the new
    keys/values."""
    new = (k, v)
    if isinstance(past, Preallocated):
        return cached_attention(past, layer, q, k, v, mask[:, None], attn.scale), new
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    groups = q.shape[1] // k.shape[1]
    if groups > 1:  # an MLA drafter's 128 key heads need no copy (one took 2.3 GiB more in an H200 profile)
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], scale=attn.scale), new
