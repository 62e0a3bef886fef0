"""An independent greedy speculative decoder for the toy pair, written with plain torch ops.

The drafter is the EAGLE-3 formula with its variants spelled out (norm_before_fc, fc_norm,
norm_output; Qwen3's per-head q/k norms where the file has them; a sliding window when given) over the
tensors of its safetensors file; the target is transformers' own model, run
over the whole text every time (no cache). Each cycle recomputes the drafter over every committed
token and the drafted path from scratch, builds SGLang's tree (top-k per node, scores multiplied
along the path, the best k of the k^2 children expanded, the best num_draft_tokens - 1 kept) and
walks it against the target's greedy continuation. Nothing here calls draftlab's runtime.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


@dataclass
class PlainDrafter:
    """The drafter folder's tensors and the config fields its formula needs."""

    t: dict[str, torch.Tensor]
    embed: torch.Tensor
    heads: int
    kv_heads: int
    head_dim: int
    theta: float
    eps: float
    norm_before_fc: bool
    fc_norm: bool
    norm_output: bool
    window: int | None = None  # keys this many positions or more behind a query are dropped

    @classmethod
    def load(cls, folder: Path, embed: torch.Tensor, window: int | None = None) -> PlainDrafter:
        """A flat (SpecForge) folder, or a speculators one (its layer's fields nested, ``layers.0.`` names)."""
        cfg = json.loads((folder / "config.json").read_text())
        layer = cfg.get("transformer_layer_config", cfg)
        t = {k.replace("layers.0.", "midlayer."): v for k, v in load_file(str(folder / "model.safetensors")).items()}
        return cls(t, embed, layer["num_attention_heads"], layer["num_key_value_heads"], layer["head_dim"],
                   float(layer["rope_theta"]), float(layer["rms_norm_eps"]), bool(cfg.get("norm_before_fc")),
                   bool(cfg.get("fc_norm")), bool(cfg.get("norm_output")), window)

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        d = self.head_dim
        inv = 1.0 / self.theta ** (torch.arange(0, d, 2).float() / d)
        ang = pos.float()[:, None] * inv[None]
        cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
        rotated = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
        return x * cos[:, None] + rotated * sin[:, None]

    def _combine(self, row: torch.Tensor) -> torch.Tensor:
        if self.norm_before_fc:
            row = _rms(row, self.t["input_norm.weight"], self.eps)
        if self.fc_norm:
            parts = row.chunk(3)
            row = torch.cat([_rms(p, self.t[f"fc_norm.{i}.weight"], self.eps) for i, p in enumerate(parts)])
        return row @ self.t["fc.weight"].T

    def __call__(self, tokens: list[int], hidden: list[torch.Tensor], pos: torch.Tensor, allowed: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits over the draft vocabulary and the hidden the next step receives, per row."""
        t, eps, n = self.t, self.eps, len(tokens)
        width = self.t["fc.weight"].shape[0]
        h = torch.stack([row if row.numel() == width else self._combine(row) for row in hidden])
        x = torch.cat([_rms(self.embed[tokens], t["midlayer.input_layernorm.weight"], eps),
                       _rms(h, t["midlayer.hidden_norm.weight"], eps)], -1)
        q = (x @ t["midlayer.self_attn.q_proj.weight"].T).view(n, self.heads, self.head_dim)
        k = (x @ t["midlayer.self_attn.k_proj.weight"].T).view(n, self.kv_heads, self.head_dim)
        if "midlayer.self_attn.q_norm.weight" in t:  # Qwen3: each head's q and k normalised before RoPE
            q = _rms(q, t["midlayer.self_attn.q_norm.weight"], eps)
            k = _rms(k, t["midlayer.self_attn.k_norm.weight"], eps)
        q, k = self._rope(q, pos), self._rope(k, pos)
        if self.window is not None:
            allowed = allowed & (pos[:, None] - pos[None, :] < self.window)
        v = (x @ t["midlayer.self_attn.v_proj.weight"].T).view(n, self.kv_heads, self.head_dim)
        out = torch.empty(n, self.heads, self.head_dim)
        for head in range(self.heads):
            kv = head // (self.heads // self.kv_heads)
            scores = (q[:, head] @ k[:, kv].T) / math.sqrt(self.head_dim)
            out[:, head] = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v[:, kv]
        r = h + out.reshape(n, -1) @ t["midlayer.self_attn.o_proj.weight"].T
        y = _rms(r, t["midlayer.post_attention_layernorm.weight"], eps)
        pre = r + (F.silu(y @ t["midlayer.mlp.gate_proj.weight"].T) * (y @ t["midlayer.mlp.up_proj.weight"].T)) \
            @ t["midlayer.mlp.down_proj.weight"].T
        normed = _rms(pre, t["norm.weight"], eps)
        return normed @ t["lm_head.weight"].T, normed if self.norm_output else pre


@dataclass
class _Node:
    token: int  # target id
    parent: _Node | None
    score: float
    depth: int
    logits: torch.Tensor | None = None
    hidden: torch.Tensor | None = None
    path: list[_Node] = field(default_factory=list)  # ancestors then itself


class Reference:
    """Greedy speculative decoding of the toy target with a plain drafter, from scratch every cycle."""

    def __init__(self, target_dir: Path, drafter_dir: Path, aux_layers: list[int], window: int | None = None) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
        self.drafter = PlainDrafter.load(drafter_dir, self.model.get_input_embeddings().weight.detach(), window)
        self.d2t = self.drafter.t["d2t"]
        self.aux = aux_layers

    @torch.no_grad()
    def accept_lengths(self, prompt: list[int], steps: int, topk: int, num_draft_tokens: int, max_new: int
                       ) -> list[int]:
        """Per-cycle accept lengths (bonus included) over ``max_new`` new tokens, EOS ignored."""
        greedy = self._greedy(prompt, max_new + steps + 1)
        seq, produced, lengths = list(prompt) + greedy[:1], 1, []
        while produced < max_new:
            out = self.model(torch.tensor([seq]), output_hidden_states=True)
            feats = torch.cat([out.hidden_states[k + 1][0] for k in self.aux], -1)
            selected = self._tree(seq, feats, steps, topk, num_draft_tokens)
            expected = greedy[len(seq) - len(prompt):]
            node, accepted = None, 0
            while True:
                child = next((c for c in selected if c.parent is node and c.token == expected[accepted]), None)
                if child is None:
                    break
                node, accepted = child, accepted + 1
            lengths.append(accepted + 1)
            seq += expected[:accepted + 1]
            produced += accepted + 1
        return lengths

    def _greedy(self, prompt: list[int], count: int) -> list[int]:
        seq = list(prompt)
        for _ in range(count):
            seq.append(int(self.model(torch.tensor([seq])).logits[0, -1].argmax()))
        return seq[len(prompt):]

    def _run(self, seq: list[int], feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The drafter over the committed tokens, each with the target's features of the token before;
        the last row's logits and hidden (the root's)."""
        n = len(seq) - 1
        logits, out = self.drafter(seq[1:], list(feats[:n]), torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril())
        return logits[-1], out[-1]

    def _children(self, parent: _Node | None, logits: torch.Tensor, k: int, depth: int) -> list[_Node]:
        p, d = logits.softmax(-1).topk(k)
        base = parent.score if parent is not None else 1.0
        return [_Node(int(i + self.d2t[i]), parent, base * float(q), depth) for q, i in zip(p, d)]

    def _tree(self, seq: list[int], feats: torch.Tensor, steps: int, k: int, num_draft_tokens: int) -> list[_Node]:
        root_logits, root_hidden = self._run(seq, feats)
        frontier = self._children(None, root_logits, k, 1)
        for node in frontier:
            node.path = [node]
        pool = list(frontier)
        for step in range(1, steps):
            children = []
            for node in frontier:
                node.logits, node.hidden = self._run_node(seq, feats, node, root_hidden)
                for child in self._children(node, node.logits, k, step + 1):
                    child.path = node.path + [child]
                    children.append(child)
            pool += children
            best = torch.tensor([c.score for c in children]).topk(k).indices.tolist()
            frontier = [children[i] for i in best]
        keep = torch.tensor([c.score for c in pool]).topk(num_draft_tokens - 1).indices.tolist()
        return [pool[i] for i in sorted(keep)]

    def _run_node(self, seq: list[int], feats: torch.Tensor, node: _Node, root_hidden: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """A node drafted from its parent's hidden, attending to the committed tokens and its ancestors."""
        n = len(seq) - 1
        tokens = seq[1:] + [p.token for p in node.path]
        hidden = list(feats[:n]) + [root_hidden] + [p.hidden for p in node.path[:-1]]
        rows = len(tokens)
        positions = torch.cat([torch.arange(n), n - 1 + torch.arange(1, len(node.path) + 1)])
        logits, out = self.drafter(tokens, hidden, positions, torch.ones(rows, rows, dtype=torch.bool).tril())
        return logits[-1], out[-1]
