"""A target's own multi-token-prediction head as a drafter (SGLang ``NEXTN``, vLLM ``mtp``), read from the
target's checkpoint, with the drafter interface the decoders and the probe use (``forward``, ``keep``,
``crop``, ``forward_masked``, ``to_target_ids``, ``config``), so they run it as they run an EAGLE-3 drafter.

One step, for the next tokens x and hidden states h (the target's final, post-norm hidden state; or the
head's own previous output at a draft step):

    u = proj(concat(embed_norm(embed(x)), hidden_norm(h)))
    y = decoder_layer(u)                    the target family's own transformers layer (MLA + MoE for
                                            DeepSeek-V3, gated attention + MoE for Qwen3-Next)
    logits = head(final_norm(y))            the target's lm_head unless the engine reads the head's own
    next h = final_norm(y) or y             as the engine feeds it back (:mod:`draftlab.engines.mtp_head`)

Two checkpoint layouts: DeepSeek-V3 / GLM (``num_nextn_predict_layers``; ``model.layers.{L}.`` with
``enorm``, ``hnorm``, ``eh_proj``, ``shared_head.norm``, optional ``shared_head.head`` and
``embed_tokens``, L = ``num_hidden_layers``) and Qwen3-Next (``mtp.pre_fc_norm_embedding``,
``mtp.pre_fc_norm_hidden``, ``mtp.fc``, ``mtp.layers.0.``, ``mtp.norm``). The attention's KV cache is
handed to the transformers layer as an object with ``update`` (:class:`_Entries`), so the growing cache
of ``forward`` and the probe's per-row pasts are plain tensors (MLA caches its compressed latents).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from draftlab.checkpoint import open_checkpoint
from draftlab.engines.mtp_head import MtpRules, MtpServing, deepseek_mtp_prefixes, mtp_rules
from draftlab.errors import DraftlabError
from draftlab.models.attention import KV
from draftlab.models.drafter import DraftStep
from draftlab.models.kernels import attention_kernels
from draftlab.models.masks import attention_mask, to_additive
from draftlab.models.target import TargetRunner
from draftlab.models.target_static import cache_keyword

MTP = "mtp"  # ``--drafter mtp``: the target's own MTP head

# checkpoint name (after the head's prefix) -> this module's name, per style; the rest is the decoder layer's
_OWN_NAMES = {
    "deepseek": {"enorm.": "embed_norm.", "hnorm.": "hidden_norm.", "eh_proj.": "proj.",
                 "shared_head.norm.": "final_norm."},
    "qwen3_next": {"pre_fc_norm_embedding.": "embed_norm.", "pre_fc_norm_hidden.": "hidden_norm.", "fc.": "proj.",
                   "norm.": "final_norm."},
}


@dataclass(frozen=True)
class MtpConfig:
    """What the decoders and the probe read of a drafter's config."""

    style: str  # "deepseek" | "qwen3_next"
    layer: str  # the checkpoint prefix of the head's layer, e.g. "model.layers.61." or "mtp."
    num_layers: int  # MTP layers the checkpoint ships (every step runs the first)
    draft_vocab_size: int  # the target's vocabulary: the head drafts over all of it
    max_position_embeddings: int | None
    sliding_window: None = None


def names_mtp(drafter: str | Path | None) -> bool:
    """Whether ``--drafter`` asks for the target's own MTP head ("mtp"); a drafter folder of that name is
    refused as ambiguous (given by its absolute path it is a folder)."""
    if drafter is None or str(drafter) != MTP:
        return False
    if Path(MTP).is_dir():
        raise DraftlabError(f"--drafter mtp names the target's own MTP head, but ./mtp is also a folder here; "
                            f"give the folder as {Path(MTP).resolve()} or run from elsewhere")
    return True


def load_mtp(target: str | Path, serving: MtpServing, *, topk: int = 1, **placement: Any
             ) -> tuple[TargetRunner, MtpDrafter]:
    """The target handing out its final hidden state, and its MTP head as ``serving``'s engine computes it.
    ``placement``: what :meth:`TargetRunner.load` takes (dtype, device, device_map, cache, max_len). A target
    with no MTP layer, one the release does not serve, or ``topk`` > 1 where it drafts a chain, is refused
    from its headers, before anything loads."""
    ckpt = open_checkpoint(target)
    mtp_layout(ckpt.config, set(ckpt.tensors), ckpt.path)
    serving.refuse_unserved(target, topk)
    runner = TargetRunner.load(target, final_hidden=True, **placement)
    return runner, MtpDrafter.load(target, runner, serving.engine)


def mtp_layout(config: dict[str, Any], names: set[str], path: Path) -> tuple[str, str, int]:
    """(style, prefix, number of MTP layers) of a target checkpoint's MTP head from its config and tensor
    names, or a DraftlabError saying it has none."""
    if "mtp.fc.weight" in names:
        return "qwen3_next", "mtp.", int(config.get("num_nextn_predict_layers") or 1)
    if any(name.startswith("model.mtp_layers.") for name in names):
        raise DraftlabError("ships MiMo-style MTP layers (model.mtp_layers.N.), which draftlab does not compute "
                            "yet; draft with an EAGLE-3 drafter (--drafter)", path=path)
    count = int(config.get("num_nextn_predict_layers") or 0)
    first = deepseek_mtp_prefixes(int(config.get("num_hidden_layers") or 0), 1)[0]
    if count < 1 or f"{first}eh_proj.weight" not in names:
        raise DraftlabError("ships no MTP layer (neither num_nextn_predict_layers with model.layers.{L}.eh_proj "
                            "nor mtp.fc); draft with an EAGLE-3 drafter (--drafter) instead", path=path)
    return "deepseek", first, count


class _Entries:
    """The KV entries one pass's attention reads, in the form transformers' attention hands them over
    (``cache.update``): the ``past`` entries, then the pass's own, which it keeps as ``new``."""

    def __init__(self, past: KV | None) -> None:
        self.past, self.new = past, None

    def update(self, keys: torch.Tensor, values: torch.Tensor, *args: Any, **kwargs: Any) -> KV:
        self.new = (keys, values)
        if self.past is None:
            return keys, values
        return torch.cat([self.past[0], keys], dim=-2), torch.cat([self.past[1], values], dim=-2)


class MtpDrafter(nn.Module):
    """A target's MTP head over its own KV cache (batch 1), as ``engine`` computes it."""

    graphs = False  # eager steps only: the decoders' graph and pipelined paths stay off
    max_len = None  # a growing cache
    windows = (None,)  # full attention

    def __init__(self, target: PreTrainedModel, config: MtpConfig, rules: MtpRules, *, embed_tokens: nn.Module,
                 lm_head: nn.Module) -> None:
        """The head of ``target`` (the transformers model whose layer classes it builds), uninitialised."""
        super().__init__()
        self.config, self.rules = config, rules
        self.embed_norm, self.hidden_norm, self.final_norm, self.decoder, self.rotary = _modules(target, config.style)
        hidden = target.config.hidden_size
        self.proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.embed_tokens, self.lm_head = embed_tokens, lm_head
        self._cache_arg = cache_keyword(self.decoder.forward)
        self.reset()

    @classmethod
    def load(cls, target_dir: str | Path, runner: TargetRunner, engine: str) -> MtpDrafter:
        """The MTP head of the checkpoint ``target_dir`` that ``runner`` runs, as ``engine`` serves it, on the
        runner's device and dtype, sharing its embedding and lm_head (unless the engine reads the head's own)."""
        ckpt = open_checkpoint(target_dir)
        style, prefix, count = mtp_layout(ckpt.config, set(ckpt.tensors), ckpt.path)
        rules = mtp_rules(engine, style)
        tensors = {name.removeprefix(prefix): t for name, t in ckpt.load(
            [n for n in ckpt.tensors if n.startswith(prefix)]).items()}
        config = MtpConfig(style, prefix, count, runner.config.vocab_size, runner.config.max_position_embeddings)
        own = {new: tensors.pop(f"{old}weight") for old, new in (("embed_tokens.", "embed"),
                                                                 ("shared_head.head.", "head"))
               if f"{old}weight" in tensors}
        embed, head = runner.embed_tokens, runner.lm_head
        if rules.own_head:
            embed = _linear_like(nn.Embedding, own["embed"]) if "embed" in own else embed
            head = _linear_like(nn.Linear, own["head"]) if "head" in own else head
        drafter = cls(runner.model, config, rules, embed_tokens=embed, lm_head=head)
        drafter._load_tensors(tensors, ckpt.path)
        return drafter.to(runner.device, runner.dtype).eval()

    def _load_tensors(self, tensors: dict[str, torch.Tensor], path: Path) -> None:
        """The head's own tensors (checkpoint names after its prefix), routed experts stacked where this
        transformers release holds them so; a missing or unexpected tensor is one line naming it."""
        names = _OWN_NAMES[self.config.style]
        state: dict[str, torch.Tensor] = {}
        stacked = any(k.endswith("mlp.experts.gate_up_proj") for k in self.decoder.state_dict())
        for name, tensor in (_stack_experts(tensors) if stacked else tensors).items():
            own = next((new + name[len(old):] for old, new in names.items() if name.startswith(old)), None)
            layer = name.removeprefix("layers.0.") if self.config.style == "qwen3_next" else name
            state[own or f"decoder.{layer}"] = tensor
        wanted = {k for k in self.state_dict() if not k.startswith(("embed_tokens.", "lm_head.", "rotary."))}
        missing, extra = sorted(wanted - set(state)), sorted(set(state) - wanted)
        if missing or extra:
            what = f"lacks {self.config.layer}{missing[0]}" if missing else f"has an unexpected {extra[0]}"
            raise DraftlabError(f"MTP layer {what}: not a {self.config.style} MTP head draftlab computes", path=path)
        self.load_state_dict(state, strict=False)

    def checkpoint_tensors(self) -> dict[str, torch.Tensor]:
        """The head's own tensors under the checkpoint's names, routed experts one by one as checkpoints hold
        them (what a target's MTP shard holds)."""
        back = {new: old for old, new in _OWN_NAMES[self.config.style].items()}
        layer = "layers.0." if self.config.style == "qwen3_next" else ""
        out: dict[str, torch.Tensor] = {}
        for name, tensor in self.state_dict().items():
            if name.startswith(("embed_tokens.", "lm_head.", "rotary.")):
                continue
            own = next((back[new] + name[len(new):] for new in back if name.startswith(new)), None)
            out.update(_unstack_experts(self.config.layer + (own or layer + name.removeprefix("decoder.")), tensor))
        return out

    # --- the decoders' interface -------------------------------------------------------------------

    def reset(self) -> None:
        """Empty the KV cache (start a new prompt)."""
        self._kv: KV | None = None  # the layer's cached entries (keys, values), entries on dim -2
        self._last_new = 0  # entries the last forward appended

    @property
    def cache_len(self) -> int:
        return 0 if self._kv is None else self._kv[0].shape[-2]

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, *, positions: torch.Tensor | None = None,
                tree_mask: torch.Tensor | None = None) -> DraftStep:
        """Run n new entries (next tokens [n], hidden states [n, H]) after the cached ones and append them;
        ``positions`` default to the next ones, ``tree_mask`` [n, n] says which new entries each may attend
        to (None: causal)."""
        device, n, cached = self.lm_head.weight.device, input_ids.numel(), self.cache_len
        at = torch.arange(cached, cached + n, device=device) if positions is None else positions.to(device)
        logits, out, kv = self.forward_masked(input_ids.reshape(1, n).to(device), hidden.reshape(1, n, -1),
                                              at.reshape(1, n), attention_mask(cached, tree_mask, n, device)[None],
                                              None if self._kv is None else [self._kv])
        self._kv, self._last_new = self._with(kv[0]), n
        return DraftStep(logits=logits[0].float(), hidden=out[0])

    def _with(self, new: KV) -> KV:
        """The cache with ``new`` entries appended."""
        if self._kv is None:
            return new
        return torch.cat([self._kv[0], new[0]], dim=-2), torch.cat([self._kv[1], new[1]], dim=-2)

    def keep(self, indices: torch.Tensor) -> None:
        """Of the entries the last forward appended, keep ``indices`` (in that order) right after the prefix."""
        indices = torch.as_tensor(indices, dtype=torch.long).reshape(-1)
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= self._last_new):
            raise DraftlabError(f"keep() indices must lie in 0..{self._last_new - 1} (the last forward's entries)")
        if self._kv is not None:
            start = self.cache_len - self._last_new
            rows = torch.cat([torch.arange(start), start + indices.cpu()]).to(self._kv[0].device)
            self._kv = (self._kv[0].index_select(-2, rows), self._kv[1].index_select(-2, rows))
        self._last_new = indices.numel()

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` cached entries."""
        if not 0 <= length <= self.cache_len:
            raise DraftlabError(f"crop() length must lie in 0..{self.cache_len}; got {length}")
        if self._kv is not None:
            self._kv = (self._kv[0][..., :length, :], self._kv[1][..., :length, :])
        self._last_new = 0

    def describe(self) -> dict[str, Any]:
        """The JSON fields naming the head: its kind, the layer every step runs, and the layers shipped."""
        layer = "mtp.layers.0" if self.config.style == "qwen3_next" else self.config.layer.rstrip(".")
        return {"drafter_kind": MTP, "mtp_layer": layer, "mtp_style": self.config.style,
                "mtp_num_layers": self.config.num_layers}

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """The head drafts over the target's whole vocabulary: draft ids are target ids."""
        return draft_ids

    # --- the batched, cache-free computation both paths share ---------------------------------------

    def forward_masked(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
                       mask: torch.Tensor, past: list[KV] | None = None, *,
                       key_positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, list[KV]]:
        """Batched steps: ``input_ids`` [B, n], ``hidden`` [B, n, H], ``positions`` [B, n], ``mask`` [B or 1,
        n, S] bool over the ``past`` entries (one (keys, values) pair: the head's one layer) then the new
        ones. Returns logits [B, n, V] (float32), the hidden state the next step takes [B, n, H], and the
        new entries as a one-layer list. ``key_positions`` is unused: the head attends without a window."""
        dtype = self.proj.weight.dtype
        embeds = self.embed_tokens(input_ids)
        if self.rules.zero_first_embedding:
            embeds = embeds.masked_fill((positions == 0)[..., None], 0.0)
        x = self.proj(torch.cat([self.embed_norm(embeds), self.hidden_norm(hidden.to(dtype))], dim=-1))
        entries = _Entries(past[0] if past else None)
        with attention_kernels():  # its cache grows: a new key length at almost every step
            y = self.decoder(x, attention_mask=to_additive(mask, dtype)[0, 0][:, None], position_ids=positions,
                             position_embeddings=self.rotary(x, positions), **{self._cache_arg: entries})
        normed = self.final_norm(y)
        logits = self.lm_head(normed).float()
        return logits, normed if self.rules.feeds_back_normed else y, [entries.new]


def _modules(target: PreTrainedModel, style: str) -> tuple[nn.Module, ...]:
    """(embed_norm, hidden_norm, final_norm, decoder layer, rotary) of the target's own classes: its decoder
    layer class as layer num_hidden_layers (DeepSeek-V3/GLM: MoE past first_k_dense_replace, as the engines
    build it), or for Qwen3-Next as a one-layer full-attention model's, as SGLang builds it
    (models/qwen3_next_mtp.py); its final norm's class; its rotary embedding."""
    decoder = target.get_decoder()
    kinds = type(decoder.layers[0]), type(decoder.norm), type(decoder.rotary_emb)
    config, index = target.config, target.config.num_hidden_layers
    if style == "qwen3_next":
        config, index = copy.deepcopy(config), 0
        config.layer_types, config.num_hidden_layers, config.mlp_only_layers = ["full_attention"], 1, []
    hidden, eps = config.hidden_size, config.rms_norm_eps
    layer = kinds[0](config, index)
    for norm in ("q_a_layernorm", "kv_a_layernorm"):  # the engines' MLA latent norms use rms_norm_eps
        if getattr(getattr(layer, "self_attn", None), norm, None) is not None:
            getattr(layer.self_attn, norm).variance_epsilon = eps
    return kinds[1](hidden, eps=eps), kinds[1](hidden, eps=eps), kinds[1](hidden, eps=eps), layer, kinds[2](config)


def _linear_like(kind: type, weight: torch.Tensor) -> nn.Module:
    """An embedding or bias-free linear head holding ``weight`` [V, H]."""
    module = nn.Embedding(*weight.shape) if kind is nn.Embedding else nn.Linear(weight.shape[1], weight.shape[0],
                                                                                bias=False)
    module.weight.data = weight
    return module


def _stack_experts(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-expert ``mlp.experts.{e}.{gate,up,down}_proj.weight`` (the checkpoints' layout) as transformers'
    stacked ``mlp.experts.gate_up_proj`` [E, 2I, H] (gate first) and ``mlp.experts.down_proj`` [E, H, I]."""
    out, experts = {}, {}
    for name, tensor in tensors.items():
        head, sep, rest = name.partition("mlp.experts.")
        index, _, part = rest.partition(".")
        if sep and index.isdigit():
            experts.setdefault(head, {}).setdefault(int(index), {})[part] = tensor
        else:
            out[name] = tensor
    for head, by_index in experts.items():
        order = [by_index[e] for e in sorted(by_index)]
        out[f"{head}mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([e["gate_proj.weight"], e["up_proj.weight"]]) for e in order])
        out[f"{head}mlp.experts.down_proj"] = torch.stack([e["down_proj.weight"] for e in order])
    return out


def _unstack_experts(name: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
    """transformers' stacked routed experts as the checkpoints' per-expert tensors (:func:`_stack_experts`
    undone); any other tensor as it is."""
    head, _, part = name.rpartition("mlp.experts.")
    if part == "gate_up_proj":
        return {f"{head}mlp.experts.{e}.{kind}.weight": half for e, both in enumerate(tensor)
                for kind, half in zip(("gate_proj", "up_proj"), both.chunk(2))}
    if part == "down_proj":
        return {f"{head}mlp.experts.{e}.down_proj.weight": down for e, down in enumerate(tensor)}
    return {name: tensor}
