"""The dense decoder layer of the static-cache families over draftlab's cache, with fused GEMMs.

At decode batch sizes every GEMM of a layer reads its whole weight for a few rows of input, so it
runs at the memory's speed only when it is large: q, k and v as three GEMMs (k and v small), and
gate and up as two, stay well below it. :class:`FusedLayer` runs one QKV GEMM and one gate_up GEMM
instead. The concatenated weights are built once per layer and the HF ``Linear`` modules are
re-pointed at views of them (:func:`fuse`), so the weights are not held twice and HF's own forward
(the dynamic-cache path, ``forward_batch``) keeps working on the same memory.

The math is HF's for llama, mistral, qwen2 and qwen3 (RMSNorm in float32, ``apply_rotary_pos_emb``,
qwen2's q/k/v biases, qwen3's per-head q/k norms, SiLU gating); sliding windows are the masks' job,
as in the rest of the walk. The elementwise work lies in two pure functions over tensors
(:func:`attention_input`, :func:`layer_output`), which ``compiled`` runs through ``torch.compile``
(default inductor mode: no cudagraphs of its own, the callers capture theirs). The weights are
arguments, so one compiled function serves every layer; attention (a cache read whose width varies)
stays outside, uncompiled.

Without a cache the layer is a plain causal pass (the probe's and the trainer's target pass over
whole sequences): attention is SDPA's causal kernel with HF's arguments (``is_causal``,
``enable_gqa``).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from draftlab.models.kernels import compiled_fn, step_kernels
from draftlab.models.static_kv import cached_attention

_FUSED: weakref.WeakKeyDictionary[torch.nn.Module, tuple[torch.Tensor, torch.Tensor | None]] = \
    weakref.WeakKeyDictionary()  # first Linear of a fused group -> its concatenated weight and bias


def fusable(model: PreTrainedModel) -> bool:
    """Whether the model's layers are what :class:`FusedLayer` computes (SiLU-gated MLPs)."""
    return getattr(model.config, "hidden_act", None) == "silu"


def fuse(linears: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The ``linears``' weights (and biases) concatenated along their outputs, the modules re-pointed
    at views of the result: one copy in memory. Done once; a later call returns the same tensors
    unless the modules' weights were replaced or moved since."""
    held = _FUSED.get(linears[0])
    if held is not None and _views_of(held[0], [m.weight for m in linears]):
        return held
    with torch.inference_mode(False), torch.no_grad():  # plain tensors even when called in inference mode
        weight = torch.cat([m.weight for m in linears]).detach()
        bias = None
        if any(m.bias is not None for m in linears):
            bias = torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.out_features)
                              for m in linears]).detach()
        row = 0
        for m in linears:
            rows = slice(row, row + m.out_features)
            m.weight = torch.nn.Parameter(weight[rows], requires_grad=m.weight.requires_grad)
            if bias is not None:
                m.bias = torch.nn.Parameter(bias[rows], requires_grad=False)
            row += m.out_features
    _FUSED[linears[0]] = (weight, bias)
    return weight, bias


def _views_of(fused: torch.Tensor, weights: list[torch.Tensor]) -> bool:
    row = 0
    for w in weights:
        if w.device != fused.device or w.data_ptr() != fused[row].data_ptr() or w.shape[1:] != fused.shape[1:]:
            return False
        row += w.shape[0]
    return row == fused.shape[0]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's RMSNorm of these families: normalised in float32, scaled in the input's dtype."""
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def attention_input(hidden: torch.Tensor, norm: torch.Tensor, eps: float, qkv: torch.Tensor,
                    qkv_bias: torch.Tensor | None, q_norm: torch.Tensor | None, k_norm: torch.Tensor | None,
                    qk_eps: float, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int,
                    head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Input norm, the QKV GEMM, per-head q/k norms (qwen3) and rope: q [B, H, n, D], k and v [B, Hkv, n, D]."""
    b, n, _ = hidden.shape
    proj = F.linear(rms_norm(hidden, norm, eps), qkv, qkv_bias)
    q, k, v = proj.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q, k, v = q.view(b, n, heads, head_dim), k.view(b, n, kv_heads, head_dim), v.view(b, n, kv_heads, head_dim)
    if q_norm is not None:
        q, k = rms_norm(q, q_norm, qk_eps), rms_norm(k, k_norm, qk_eps)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    cos, sin = cos[:, None], sin[:, None]
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v


def layer_output(residual: torch.Tensor, attended: torch.Tensor, o_proj: torch.Tensor, o_bias: torch.Tensor | None,
                 norm: torch.Tensor, eps: float, gate_up: torch.Tensor, gate_up_bias: torch.Tensor | None,
                 down: torch.Tensor, down_bias: torch.Tensor | None) -> torch.Tensor:
    """The rest of the layer after attention: o_proj and residual, post-attention norm, the gate_up
    GEMM, SiLU(gate) * up, down_proj and residual."""
    hidden = residual + F.linear(attended, o_proj, o_bias)
    gate, up = F.linear(rms_norm(hidden, norm, eps), gate_up, gate_up_bias).chunk(2, dim=-1)
    return hidden + F.linear(F.silu(gate) * up, down, down_bias)


class FusedLayer:
    """One decoder layer of llama, mistral, qwen2 or qwen3 with fused QKV and gate_up GEMMs, over any
    cache with the HF ``update``."""

    def __init__(self, layer: torch.nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv, self.qkv_bias = fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        self.gate_up, self.gate_up_bias = fuse([mlp.gate_proj, mlp.up_proj])
        self.o_proj, self.down_proj = attn.o_proj, mlp.down_proj
        self.head_dim = attn.head_dim
        self.heads = attn.q_proj.out_features // self.head_dim
        self.kv_heads = attn.k_proj.out_features // self.head_dim
        self.scaling, self.index = attn.scaling, attn.layer_idx
        self.norms = layer.input_layernorm, layer.post_attention_layernorm
        self.qk_norms = (attn.q_norm, attn.k_norm) if hasattr(attn, "q_norm") else None

    def __call__(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None,
                 cache: object | None, compiled: bool = False) -> torch.Tensor:
        """hidden [B, n, H] -> the layer's output; ``mask`` additive [B or 1, 1, n, S] over the slots
        the cache's ``update`` returns. ``cache`` None: a causal pass over the n tokens alone (``mask``
        unused). ``compiled``: the parts around attention through torch.compile."""
        first = compiled_fn(attention_input) if compiled else attention_input
        last = compiled_fn(layer_output) if compiled else layer_output
        q_norm, k_norm = self.qk_norms or (None, None)
        q, k, v = first(hidden, self.norms[0].weight, self.norms[0].variance_epsilon, self.qkv, self.qkv_bias,
                        None if q_norm is None else q_norm.weight, None if k_norm is None else k_norm.weight,
                        0.0 if q_norm is None else q_norm.variance_epsilon, cos, sin, self.heads, self.kv_heads,
                        self.head_dim)
        if cache is None:
            with step_kernels():
                attended = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scaling, enable_gqa=True)
        else:
            attended = cached_attention(cache, self.index, q, k, v, mask, self.scaling)
        attended = attended.transpose(1, 2).reshape(*hidden.shape[:2], -1)
        return last(hidden, attended, self.o_proj.weight, self.o_proj.bias, self.norms[1].weight,
                    self.norms[1].variance_epsilon, self.gate_up, self.gate_up_bias, self.down_proj.weight,
                    self.down_proj.bias)
