"""MTP heads written plainly from the target's checkpoint, independent of draftlab's modules: the target
family's own transformers decoder layer (DeepSeek-V3's MLA + MoE at index num_hidden_layers; Qwen3-Next's
full-attention MoE layer as a one-layer model's, as SGLang builds it), its routed experts stacked here from
the checkpoint's per-expert tensors, the RMS norms as the formula (Qwen3-Next's zero-centred: 1 + w), the
target's embedding and lm_head; every call recomputes the head over all its rows (no cache). The next
step's hidden state is the final norm's output, as SGLang feeds it back."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors import safe_open
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer, DeepseekV3RotaryEmbedding
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextDecoderLayer, Qwen3NextRotaryEmbedding

# per model_type: the head's prefix, its layer's prefix inside it, its norms and projection, zero-centred norms
LAYOUTS = {
    "deepseek_v3": {"layer": "", "embed": "enorm", "hidden": "hnorm", "proj": "eh_proj", "final": "shared_head.norm",
                    "plus_one": False},
    "qwen3_next": {"layer": "layers.0.", "embed": "pre_fc_norm_embedding", "hidden": "pre_fc_norm_hidden",
                   "proj": "fc", "final": "norm", "plus_one": True},
}


def head_tensors(target_dir: Path, prefix: str) -> dict[str, torch.Tensor]:
    """Every tensor under ``prefix`` (the prefix cut), read through the checkpoint's shard index."""
    weight_map = json.loads((target_dir / "model.safetensors.index.json").read_text())["weight_map"]
    out = {}
    for name, shard in weight_map.items():
        if name.startswith(prefix):
            with safe_open(str(target_dir / shard), framework="pt") as f:
                out[name.removeprefix(prefix)] = f.get_tensor(name)
    return out


def stacked_layer(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A layer's tensors with its per-expert weights stacked as transformers holds them (gate before up)."""
    state = {k: v for k, v in t.items() if ".experts." not in k}
    count = len({k.split(".")[2] for k in t if k.startswith("mlp.experts.")})
    state["mlp.experts.gate_up_proj"] = torch.stack([torch.cat(
        [t[f"mlp.experts.{e}.gate_proj.weight"], t[f"mlp.experts.{e}.up_proj.weight"]]) for e in range(count)])
    state["mlp.experts.down_proj"] = torch.stack([t[f"mlp.experts.{e}.down_proj.weight"] for e in range(count)])
    return state


class MtpReference:
    """The MTP head of ``target`` (a transformers DeepSeek-V3 or Qwen3-Next model) stored under
    ``target_dir``. ``skip``: which input norms to leave out ("embed", "hidden"), to show they matter."""

    def __init__(self, target, target_dir: Path, skip: tuple[str, ...] = ()) -> None:
        config = copy.deepcopy(target.config)
        config._attn_implementation = "eager"
        self.names = LAYOUTS[config.model_type]
        if config.model_type == "qwen3_next":
            self.t = head_tensors(target_dir, "mtp.")
            config.layer_types, config.num_hidden_layers = ["full_attention"], 1
            self.layer, self.rotary = Qwen3NextDecoderLayer(config, 0), Qwen3NextRotaryEmbedding(config)
        else:
            self.t = head_tensors(target_dir, f"model.layers.{config.num_hidden_layers}.")
            self.layer = DeepseekV3DecoderLayer(config, config.num_hidden_layers)
            self.rotary = DeepseekV3RotaryEmbedding(config)
        layer = self.names["layer"]
        own = tuple(f"{self.names[k]}." for k in ("embed", "hidden", "proj", "final"))
        self.layer.load_state_dict(stacked_layer({k.removeprefix(layer): v for k, v in self.t.items()
                                                  if k.startswith(layer) and not k.startswith(own)}), strict=True)
        self.layer.eval()
        self.eps, self.skip = config.rms_norm_eps, skip
        self.embed, self.lm_head = target.get_input_embeddings(), target.get_output_embeddings()

    def _rms(self, x: torch.Tensor, which: str) -> torch.Tensor:
        if which in self.skip:
            return x
        weight = self.t[f"{self.names[which]}.weight"]
        return (1 + weight if self.names["plus_one"] else weight) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
                                                                                     + self.eps))

    @torch.no_grad()
    def __call__(self, tokens: list[int], hidden: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Row j: the embedding of ``tokens[j]`` and ``hidden[j]``, at position j, causal. Returns the last
        row's logits and the hidden state its next step takes."""
        n = len(tokens)
        x = torch.cat([self._rms(self.embed(torch.tensor(tokens)), "embed"),
                       self._rms(torch.stack(hidden), "hidden")], -1) @ self.t[f"{self.names['proj']}.weight"].T
        positions = torch.arange(n)[None]
        mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
        y = self.layer(x[None], attention_mask=mask, position_ids=positions,
                       position_embeddings=self.rotary(x[None], positions))[0]
        normed = self._rms(y, "final")
        return self.lm_head(normed[-1]), normed[-1]
