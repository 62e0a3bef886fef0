"""A DeepSeek-V3 MTP head written plainly from the target's checkpoint, independent of draftlab's modules:
transformers' own ``DeepseekV3DecoderLayer`` (MLA + MoE, its routed experts stacked here from the
checkpoint's per-expert tensors), the RMS norms as the formula, the target's embedding and lm_head; every
call recomputes the head over all its rows (no cache). The next step's hidden state is the final norm's
output, as SGLang feeds it back (``deepseek_nextn.py``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors import safe_open
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer, DeepseekV3RotaryEmbedding


def head_tensors(target_dir: Path, prefix: str) -> dict[str, torch.Tensor]:
    """Every tensor under ``prefix`` (the prefix cut), read through the checkpoint's shard index."""
    weight_map = json.loads((target_dir / "model.safetensors.index.json").read_text())["weight_map"]
    out = {}
    for name, shard in weight_map.items():
        if name.startswith(prefix):
            with safe_open(str(target_dir / shard), framework="pt") as f:
                out[name.removeprefix(prefix)] = f.get_tensor(name)
    return out


class MtpReference:
    """The MTP head of ``target`` (a transformers DeepSeek-V3 model) stored under ``target_dir``.
    ``skip``: names of norms to leave out ("enorm", "hnorm"), to show they matter."""

    def __init__(self, target, target_dir: Path, skip: tuple[str, ...] = ()) -> None:
        config = copy.deepcopy(target.config)
        config._attn_implementation = "eager"
        self.t = head_tensors(target_dir, f"model.layers.{config.num_hidden_layers}.")
        self.eps, self.skip = config.rms_norm_eps, skip
        self.embed, self.lm_head = target.get_input_embeddings(), target.get_output_embeddings()
        self.layer = DeepseekV3DecoderLayer(config, config.num_hidden_layers).eval()
        self.layer.load_state_dict(self._layer_state(), strict=True)
        self.rotary = DeepseekV3RotaryEmbedding(config)

    def _layer_state(self) -> dict[str, torch.Tensor]:
        own = ("enorm.", "hnorm.", "eh_proj.", "shared_head.")
        state = {k: v for k, v in self.t.items() if not k.startswith(own) and ".experts." not in k}
        count = len({k.split(".")[2] for k in self.t if k.startswith("mlp.experts.")})
        state["mlp.experts.gate_up_proj"] = torch.stack([torch.cat(
            [self.t[f"mlp.experts.{e}.gate_proj.weight"], self.t[f"mlp.experts.{e}.up_proj.weight"]])
            for e in range(count)])
        state["mlp.experts.down_proj"] = torch.stack([self.t[f"mlp.experts.{e}.down_proj.weight"]
                                                      for e in range(count)])
        return state

    def _rms(self, x: torch.Tensor, name: str) -> torch.Tensor:
        if name in self.skip:
            return x
        return self.t[f"{name}.weight"] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    @torch.no_grad()
    def __call__(self, tokens: list[int], hidden: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Row j: the embedding of ``tokens[j]`` and ``hidden[j]``, at position j, causal. Returns the last
        row's logits and the hidden state its next step takes."""
        n = len(tokens)
        x = torch.cat([self._rms(self.embed(torch.tensor(tokens)), "enorm"),
                       self._rms(torch.stack(hidden), "hnorm")], -1) @ self.t["eh_proj.weight"].T
        positions = torch.arange(n)[None]
        mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
        y = self.layer(x[None], attention_mask=mask, position_ids=positions,
                       position_embeddings=self.rotary(x[None], positions))[0]
        normed = self._rms(y, "shared_head.norm")
        return self.lm_head(normed[-1]), normed[-1]
