"""An MLA EAGLE-3 drafter (``Eagle3DeepseekV2ForCausalLM``) written plainly, independent of draftlab's
modules: the attention is transformers' own ``DeepseekV3Attention`` with its down-projections widened
to the 2H concat (and the engines' norm eps inside), the rest torch ops. Sizes come from the config."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding


def hf_attention(t: dict[str, torch.Tensor], config: dict) -> tuple[DeepseekV3Attention, DeepseekV3RotaryEmbedding]:
    """transformers' DeepSeek-V3 MLA with 2H-input down-projections, loaded from ``t`` (midlayer names)."""
    h, heads, q_rank = config["hidden_size"], config["num_attention_heads"], config.get("q_lora_rank")
    kv_rank, nope, rope = config["kv_lora_rank"], config["qk_nope_head_dim"], config["qk_rope_head_dim"]
    eps = config["rms_norm_eps"]
    scaling = dict(config.get("rope_scaling") or {"rope_type": "default"})
    scaling["rope_type"] = scaling.pop("type", scaling.get("rope_type"))
    cfg = DeepseekV3Config(hidden_size=h, num_attention_heads=heads, num_key_value_heads=heads, q_lora_rank=q_rank,
                           kv_lora_rank=kv_rank, qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                           v_head_dim=config["v_head_dim"], rms_norm_eps=eps,
                           max_position_embeddings=config["max_position_embeddings"],
                           rope_parameters={**scaling, "rope_theta": config["rope_theta"]}, attention_bias=False)
    cfg._attn_implementation = "eager"
    attn = DeepseekV3Attention(cfg, 0)
    if q_rank is None:
        attn.q_proj = nn.Linear(2 * h, heads * (nope + rope), bias=False)
    else:
        attn.q_a_proj = nn.Linear(2 * h, q_rank, bias=False)
        attn.q_a_layernorm.variance_epsilon = eps  # transformers uses 1e-6 here; vLLM and SGLang rms_norm_eps
    attn.kv_a_proj_with_mqa = nn.Linear(2 * h, kv_rank + rope, bias=False)
    attn.kv_a_layernorm.variance_epsilon = eps
    own = {k.removeprefix("midlayer.self_attn."): v for k, v in t.items() if k.startswith("midlayer.self_attn.")}
    attn.load_state_dict(own, strict=True)
    return attn.eval(), DeepseekV3RotaryEmbedding(cfg)


def run_hf_attention(attn: DeepseekV3Attention, rotary: DeepseekV3RotaryEmbedding, x: torch.Tensor,
                     pos: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """x [n, 2H] at positions ``pos`` [n], ``allowed`` [n, n] bool -> [n, H]."""
    with torch.no_grad():
        cos_sin = rotary(x[None], pos[None])
        mask = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[None, None]
        return attn(x[None], cos_sin, mask)[0][0]


class MlaReference:
    """The drafter of ``config`` over tensors ``t`` (SpecForge names; ``embed_tokens.weight`` included)."""

    def __init__(self, t: dict[str, torch.Tensor], config: dict) -> None:
        self.t, self.config = t, config
        self.eps = config["rms_norm_eps"]
        self.width = config["hidden_size"]
        self.attn, self.rotary = hf_attention(t, config)

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def _combine(self, row: torch.Tensor) -> torch.Tensor:
        """Target features (wider than H) -> fc_norm per aux feature (EAGLE-3.1) -> fc; drafter outputs as they are."""
        if row.numel() == self.width:
            return row
        if self.config.get("fc_norm"):
            row = torch.cat([self._rms(c, self.t[f"fc_norm.{i}.weight"]) for i, c in enumerate(row.chunk(3))])
        return row @ self.t["fc.weight"].T

    def __call__(self, ids: torch.Tensor, hidden: torch.Tensor | list[torch.Tensor], pos: torch.Tensor,
                 allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logits, pre-norm output and the hidden the next draft step receives, per row; causal by default."""
        t, n = self.t, ids.numel()
        allowed = torch.ones(n, n, dtype=torch.bool).tril() if allowed is None else allowed
        h = torch.stack([self._combine(row) for row in hidden])
        normed = self._rms(h, t["midlayer.hidden_norm.weight"])
        x = torch.cat([self._rms(t["embed_tokens.weight"][ids], t["midlayer.input_layernorm.weight"]), normed], -1)
        base = normed if self.config.get("norm_before_residual") else h  # vLLM's variant
        r = base + run_hf_attention(self.attn, self.rotary, x, pos, allowed)
        m = self._rms(r, t["midlayer.post_attention_layernorm.weight"])
        m = (F.silu(m @ t["midlayer.mlp.gate_proj.weight"].T) * (m @ t["midlayer.mlp.up_proj.weight"].T)) \
            @ t["midlayer.mlp.down_proj.weight"].T
        pre = m + r
        post = self._rms(pre, t["norm.weight"])
        return post @ t["lm_head.weight"].T, pre, post if self.config.get("norm_output") else pre
