"""Tiny random EAGLE-3 drafter checkpoints in both layouts, and the drafter formula written plainly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

H, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, DRAFT_VOCAB, THETA, EPS = 32, 4, 2, 8, 48, 97, 40, 10000.0, 1e-6


def drafter_tensors(*, layers: int = 1, seed: int = 0, with_embed: bool = True) -> dict[str, torch.Tensor]:
    """SpecForge-named random weights (norm weights away from 1 so a skipped norm shows)."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) / math.sqrt(shape[-1])

    def norm() -> torch.Tensor:
        return 1 + 0.3 * torch.randn(H, generator=g)

    def layer(prefix: str, in_size: int, first: bool) -> dict[str, torch.Tensor]:
        t = {f"{prefix}.self_attn.q_proj.weight": w(HEADS * HEAD_DIM, in_size),
             f"{prefix}.self_attn.k_proj.weight": w(KV_HEADS * HEAD_DIM, in_size),
             f"{prefix}.self_attn.v_proj.weight": w(KV_HEADS * HEAD_DIM, in_size),
             f"{prefix}.self_attn.o_proj.weight": w(H, HEADS * HEAD_DIM),
             f"{prefix}.mlp.gate_proj.weight": w(INTER, H), f"{prefix}.mlp.up_proj.weight": w(INTER, H),
             f"{prefix}.mlp.down_proj.weight": w(H, INTER),
             f"{prefix}.hidden_norm.weight": norm(), f"{prefix}.post_attention_layernorm.weight": norm()}
        if first:
            t[f"{prefix}.input_layernorm.weight"] = norm()
        return t

    t = {"fc.weight": w(H, 3 * H), "norm.weight": norm(), "lm_head.weight": w(DRAFT_VOCAB, H),
         "d2t": torch.arange(DRAFT_VOCAB) % 3, "t2d": torch.zeros(VOCAB, dtype=torch.bool)}
    t.update(layer("midlayer", 2 * H, True))
    for i in range(layers - 1):
        t.update(layer(f"additional_layers.{i}", H, False))
    if with_embed:
        t["embed_tokens.weight"] = torch.randn(VOCAB, H, generator=g)
    return t


def qk_norms(tensors: dict[str, torch.Tensor], seed: int = 1) -> dict[str, torch.Tensor]:
    """``tensors`` with Qwen3's per-head q_norm/k_norm weights (away from 1) on the first layer."""
    g = torch.Generator().manual_seed(seed)
    return {**tensors, **{f"midlayer.self_attn.{n}.weight": 1 + 0.5 * torch.randn(HEAD_DIM, generator=g)
                          for n in ("q_norm", "k_norm")}}


def tied_head(tensors: dict[str, torch.Tensor], target_id: int) -> dict[str, torch.Tensor]:
    """The drafter with an all-zero lm_head: every logit is exactly 0.0, so every draft step is one exact
    tie over the whole draft vocabulary (SGLang drafts draft id 0, the first maximum); d2t maps draft
    id 0 to ``target_id``."""
    tied = dict(tensors, **{"lm_head.weight": torch.zeros_like(tensors["lm_head.weight"])})
    tied["d2t"] = tensors["d2t"].clone()
    tied["d2t"][0] = target_id
    return tied


def llama_fields(layers: int = 1, rope_scaling: dict | None = None) -> dict:
    return {"model_type": "llama", "hidden_size": H, "intermediate_size": INTER, "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "num_hidden_layers": layers,
            "rms_norm_eps": EPS, "rope_theta": THETA, "rope_scaling": rope_scaling, "hidden_act": "silu",
            "max_position_embeddings": 512, "vocab_size": VOCAB, "tie_word_embeddings": False}


def write_specforge(folder: Path, tensors: dict[str, torch.Tensor], *, layers: int = 1, prefix: str = "",
                    rope_scaling: dict | None = None, fields: dict | None = None) -> Path:
    """A SpecForge-layout folder; ``fields`` are added to (or replace) the layer's config keys."""
    folder.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLMEagle3"], **llama_fields(layers, rope_scaling), **(fields or {}),
              "draft_vocab_size": DRAFT_VOCAB, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 3]}}
    (folder / "config.json").write_text(json.dumps(config))
    save_file({prefix + k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    return folder


def write_speculators(folder: Path, tensors: dict[str, torch.Tensor], *, norm_before_residual: bool = False,
                      fields: dict | None = None) -> Path:
    """A speculators-layout folder; ``fields`` are added to (or replace) transformer_layer_config's keys."""
    folder.mkdir(parents=True)
    config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
              "transformer_layer_config": {**llama_fields(), **(fields or {})}, "draft_vocab_size": DRAFT_VOCAB,
              "speculators_config": {"algorithm": "eagle3"},
              # speculators defaults to True; False computes the SpecForge/SGLang formula
              "norm_before_residual": norm_before_residual}
    (folder / "config.json").write_text(json.dumps(config))
    renamed = {"model." + k.replace("midlayer.", "layers.0."): v.contiguous() for k, v in tensors.items()}
    save_file(renamed, str(folder / "model.safetensors"))
    return folder


# --- the formula, written out with plain torch ops (independent of draftlab's modules) ---

def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def _rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    inv = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM)
    ang = pos.float()[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    half = HEAD_DIM // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos[:, None] + rotated * sin[:, None]


def _attn(t: dict, p: str, x: torch.Tensor, pos: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    q = (x @ t[f"{p}.self_attn.q_proj.weight"].T).view(n, HEADS, HEAD_DIM)
    k = (x @ t[f"{p}.self_attn.k_proj.weight"].T).view(n, KV_HEADS, HEAD_DIM)
    if f"{p}.self_attn.q_norm.weight" in t:  # Qwen3's per-head norms, before RoPE
        q, k = _rms(q, t[f"{p}.self_attn.q_norm.weight"]), _rms(k, t[f"{p}.self_attn.k_norm.weight"])
    q, k = _rope(q, pos), _rope(k, pos)
    v = (x @ t[f"{p}.self_attn.v_proj.weight"].T).view(n, KV_HEADS, HEAD_DIM)
    out = torch.empty(n, HEADS, HEAD_DIM)
    for h in range(HEADS):
        kv = h // (HEADS // KV_HEADS)
        scores = (q[:, h] @ k[:, kv].T) / math.sqrt(HEAD_DIM)
        scores = scores.masked_fill(~allowed, float("-inf"))
        out[:, h] = scores.softmax(-1) @ v[:, kv]
    return out.reshape(n, -1) @ t[f"{p}.self_attn.o_proj.weight"].T


def _mlp(t: dict, p: str, x: torch.Tensor) -> torch.Tensor:
    return (F.silu(x @ t[f"{p}.mlp.gate_proj.weight"].T) * (x @ t[f"{p}.mlp.up_proj.weight"].T)) \
        @ t[f"{p}.mlp.down_proj.weight"].T


def reference(t: dict, embed: torch.Tensor, ids: torch.Tensor, hidden: torch.Tensor, *, layers: int = 1,
              allowed: torch.Tensor | None = None, pos: torch.Tensor | None = None,
              norm_before_residual: bool = False, windows: tuple[int | None, ...] | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and pre-norm output of a sequence; `hidden` rows of width 3H go through fc, width H do not.
    ``windows``: layer i sees only keys less than windows[i] positions behind the query."""
    n = ids.numel()
    pos = torch.arange(n) if pos is None else pos
    allowed = torch.ones(n, n, dtype=torch.bool).tril() if allowed is None else allowed
    near = [allowed if w is None else allowed & (pos[:, None] - pos[None, :] < w) for w in windows or [None] * layers]
    h = torch.stack([row @ t["fc.weight"].T if row.numel() == 3 * H else row for row in hidden])
    x = torch.cat([_rms(embed[ids], t["midlayer.input_layernorm.weight"]),
                   _rms(h, t["midlayer.hidden_norm.weight"])], -1)
    base = _rms(h, t["midlayer.hidden_norm.weight"]) if norm_before_residual else h  # vLLM's variant
    r = base + _attn(t, "midlayer", x, pos, near[0])
    m = _mlp(t, "midlayer", _rms(r, t["midlayer.post_attention_layernorm.weight"]))
    for i in range(layers - 1):  # SGLang's BasicDecoderLayer: input is the MLP output alone
        p = f"additional_layers.{i}"
        r = m + _attn(t, p, _rms(m, t[f"{p}.hidden_norm.weight"]), pos, near[i + 1])
        m = _mlp(t, p, _rms(r, t[f"{p}.post_attention_layernorm.weight"]))
    pre = m + r
    return _rms(pre, t["norm.weight"]) @ t["lm_head.weight"].T, pre
