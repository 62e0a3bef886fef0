"""The EAGLE-3 drafter, computed as SGLang and SpecForge compute it.

One step, for tokens x (target ids) and hidden states h:

    h  = fc(h)                      only for target features (width != hidden_size)
    a  = attn(concat(input_layernorm(embed(x)), hidden_norm(h)))     q/k/v take 2 * hidden
    r  = h + a                      residual on the hidden branch (hidden_norm(h) with norm_before_residual)
    m  = mlp(post_attention_layernorm(r))
    out = m + r                     pre-norm output, fed back as `hidden` at the next draft step
    logits = lm_head(norm(out))     over the draft vocabulary; target id = draft id + d2t[draft id]

The variants (:mod:`draftlab.checkpoint.variants`) change two places, :meth:`Eagle3Drafter.combine`
(the norms of the aux features before fc, one module per flag of ``FEATURE_NORMS``: ``input_norm``
over the features with norm_before_fc, one ``fc_norm`` per aux feature with EAGLE-3.1's fc_norm) and
:meth:`Eagle3Drafter.finish` (norm_output feeds norm(out) back instead of out), and the attention, one
kind per module beside this one (:mod:`draftlab.models.attention`): grouped-query attention
(:mod:`draftlab.models.gqa`), MLA (:mod:`draftlab.models.mla`) for DeepSeek/Kimi drafters.

Each layer attends with its own sliding window (:attr:`Eagle3Drafter.windows`, None: full attention): a key
``W`` or more positions behind its query is dropped, transformers' ``q - k < W`` and vLLM's
``window_size=(W - 1, 0)`` (``flash_attn.py``); which window an engine serves is
:class:`~draftlab.engines.deployment.Deployment`'s answer. Every path applies it to its mask by the keys'
positions (the growing cache's, the static cache's slots', the batched cache's rows'), so the kernels that
read a mask (SDPA, the split-KV kernels) need nothing else. A Qwen3-architecture drafter
(``transformer_layer_config.model_type: qwen3``) adds per-head q/k norms (:mod:`draftlab.models.gqa`).

With ``num_hidden_layers > 1`` SGLang's ``additional_layers`` follow, each taking the previous
layer's MLP output m (SGLang drops the running residual there) as hidden_norm -> attn -> +,
post_attention_layernorm -> mlp. RoPE comes from the drafter's own config through transformers'
rotary implementation (default, llama3, yarn, ...; DeepSeek-V3's over the rope dims for MLA).

Two ways to run: :meth:`Eagle3Drafter.forward` over the drafter's own KV cache (batch 1, like
:class:`~draftlab.models.target.TargetRunner`), and :meth:`Eagle3Drafter.forward_masked`, a batched
cache-free pass with explicit positions and a full attention mask (training, offline probes).
:meth:`Eagle3Drafter.use_static_cache` switches ``forward`` to a preallocated cache
(:mod:`draftlab.models.static_kv`) whose steps of up to 64 tokens replay as CUDA graphs on CUDA.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from draftlab.checkpoint import Checkpoint, DrafterConfig, drafter_config, is_drafter, open_checkpoint
from draftlab.checkpoint.variants import FEATURE_NORMS, VariantFlag, unsupported
from draftlab.errors import DraftlabError
from draftlab.models.attention import KV, CosSin, Preallocated, attention
from draftlab.models.devices import parse_device, parse_dtype
from draftlab.models.drafter_weights import canonical_names
from draftlab.models.gqa import GqaAttention
from draftlab.models.graphs import BUCKETS, GraphSteps, bucket, pad_to_bucket
from draftlab.models.kernels import attention_kernels, compile_failed, compiled_fn, say_uncompiled
from draftlab.models.masks import apply_window, attention_mask, new_token_mask
from draftlab.models.mla import MlaAttention, deepseek_rotary
from draftlab.models.static_kv import StaticKV

if TYPE_CHECKING:
    from draftlab.models.target import TargetRunner


@dataclass
class DraftStep:
    logits: torch.Tensor  # [n, draft_vocab] float32
    hidden: torch.Tensor  # [n, H] the next step's `hidden` (pre-norm output; norm(out) with norm_output)


def _attention_module(in_size: int, cfg: DrafterConfig, bias: bool) -> GqaAttention | MlaAttention:
    """The drafter layer's attention: MLA for DeepSeek/Kimi drafters, else grouped-query attention."""
    if cfg.variant.mla is not None:
        return MlaAttention(in_size, cfg)
    return GqaAttention(in_size, cfg, bias)


def _rotary(cfg: DrafterConfig, llama: LlamaConfig) -> nn.Module:
    """The RoPE cos/sin the layer's attention takes: DeepSeek's over the rope dims (YaRN included) for
    MLA drafters, else Llama's over the head."""
    if cfg.variant.mla is not None:
        return deepseek_rotary(cfg)
    return LlamaRotaryEmbedding(llama)


class _FirstLayer(nn.Module):
    """``midlayer``: attention over concat(input_layernorm(embeds), hidden_norm(hidden))."""

    def __init__(self, cfg: DrafterConfig, llama: LlamaConfig, bias: bool) -> None:
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.norm_before_residual = cfg.norm_before_residual
        self.input_layernorm, self.hidden_norm = LlamaRMSNorm(h, eps), LlamaRMSNorm(h, eps)
        self.post_attention_layernorm = LlamaRMSNorm(h, eps)
        self.self_attn = _attention_module(2 * h, cfg, bias)
        self.mlp = LlamaMLP(llama)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, rope: CosSin,
                past: KV | Preallocated | None, mask: torch.Tensor, compiled: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor, KV]:
        q, k, v, residual = _part(_first_input, compiled)(self, embeds, hidden, rope)
        attended, kv = attention(self.self_attn, q, k, v, past, mask, 0)
        return (*_part(_first_output, compiled)(self, attended, residual), kv)


class _ExtraLayer(nn.Module):
    """SGLang's ``additional_layers`` entry (``BasicDecoderLayer``)."""

    def __init__(self, cfg: DrafterConfig, llama: LlamaConfig, bias: bool) -> None:
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.hidden_norm, self.post_attention_layernorm = LlamaRMSNorm(h, eps), LlamaRMSNorm(h, eps)
        self.self_attn = GqaAttention(h, cfg, bias)
        self.mlp = LlamaMLP(llama)

    def forward(self, hidden: torch.Tensor, rope: CosSin, past: KV | Preallocated | None,
                mask: torch.Tensor, layer: int, compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor, KV]:
        q, k, v = _part(_extra_input, compiled)(self, hidden, rope)
        attended, kv = attention(self.self_attn, q, k, v, past, mask, layer)
        return (*_part(_extra_output, compiled)(self, attended, hidden), kv)


# The layers' work around attention, as functions of the modules, so that a compiled drafter runs the
# same math through torch.compile (``compiled_fn``: rounded where eager rounds) in a few fused kernels.
# Each function serves one kind of layer: dynamo specialises a function on its module's type, and one
# function over both kinds recompiled at every alternation, past its limit of 8.

def _part(fn: Callable[..., Any], compiled: bool) -> Callable[..., Any]:
    return compiled_fn(fn) if compiled else fn


def _first_input(layer: _FirstLayer, embeds: torch.Tensor, hidden: torch.Tensor,
                 rope: CosSin) -> tuple[torch.Tensor, ...]:
    """The first layer up to attention: q, k, v of concat(input_layernorm(embeds), hidden_norm(hidden))
    and the residual (hidden, or hidden_norm(hidden) with norm_before_residual)."""
    normed = layer.hidden_norm(hidden)
    residual = normed if layer.norm_before_residual else hidden
    return *layer.self_attn.project(torch.cat([layer.input_layernorm(embeds), normed], dim=-1), rope), residual


def _extra_input(layer: _ExtraLayer, hidden: torch.Tensor, rope: CosSin
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An additional layer up to attention: q, k, v of hidden_norm(hidden)."""
    return layer.self_attn.project(layer.hidden_norm(hidden), rope)


def _first_output(layer: _FirstLayer, attended: torch.Tensor, residual: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The first layer after attention (:func:`_after_attention`)."""
    return _after_attention(layer, attended, residual)


def _extra_output(layer: _ExtraLayer, attended: torch.Tensor, residual: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """An additional layer after attention (:func:`_after_attention`)."""
    return _after_attention(layer, attended, residual)


def _after_attention(layer: _FirstLayer | _ExtraLayer, attended: torch.Tensor, residual: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """o_proj of the attention result added to the residual, then the MLP: returns the MLP's output m and
    the residual (m + residual is the layer's pre-norm output)."""
    residual = residual + layer.self_attn.output(attended)
    return layer.mlp(layer.post_attention_layernorm(residual)), residual


class Eagle3Drafter(nn.Module):
    """An EAGLE-3 drafter with its own KV cache (batch 1) and a batched masked path."""

    def __init__(self, config: DrafterConfig, *, embed_tokens: nn.Embedding | None = None,
                 fc_in: int | None = None, bias: bool = False, windows: tuple[int | None, ...] | None = None) -> None:
        super().__init__()
        self.config = config
        self.variant = config.variant
        self.windows = checked_windows(config, windows)
        h = config.hidden_size
        llama = _llama_config(config)
        self.embed_tokens = embed_tokens if embed_tokens is not None else nn.Embedding(config.vocab_size, h)
        fc_in = fc_in or 3 * config.target_hidden_size
        eps = config.rms_norm_eps
        num_aux = max(1, fc_in // config.target_hidden_size)
        for flag in FEATURE_NORMS:  # input_norm, fc_norm: None where the variant does not set the flag
            on = getattr(self.variant, flag.name)
            setattr(self, flag.module, _feature_norm(flag, fc_in, num_aux, eps) if on else None)
        self.fc = nn.Linear(fc_in, h, bias=bool(config.layer_config.get("bias")))
        self.midlayer = _FirstLayer(config, llama, bias)
        self.additional_layers = nn.ModuleList(_ExtraLayer(config, llama, bias) for _ in range(config.num_layers - 1))
        self.norm = LlamaRMSNorm(h, config.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.rotary = _rotary(config, llama)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self._static: StaticKV | None = None
        self.reset()

    @classmethod
    def load(cls, path: str | Path, *, target: TargetRunner | None = None, use_target_embedding: bool = True,
             dtype: str = "float32", device: str = "cpu", windows: tuple[int | None, ...] | None = None
             ) -> Eagle3Drafter:
        """Load a SpecForge- or speculators-layout drafter folder.

        ``windows``: each layer's sliding window as the engine serves it (None: full attention), default
        the config's (``DrafterConfig.layer_windows``); :class:`~draftlab.engines.deployment.Deployment`
        says which an engine applies. The embedding is the target's when ``use_target_embedding`` and the
        hidden sizes match (as SGLang does); otherwise the checkpoint's own ``embed_tokens.weight``. With no ``lm_head.weight``
        and a null ``draft_vocab_size``, the head is the target's (SGLang's ``load_lm_head_from_target``).
        """
        path = Path(path)
        ckpt = open_checkpoint(path)
        if not is_drafter(ckpt):
            raise DraftlabError("is not an EAGLE-3 drafter (no drafter architecture, speculators config "
                                "or fc/midlayer tensors)", path=path)
        refuse_unsupported(ckpt)
        config = drafter_config(ckpt)
        tensors = canonical_names(ckpt.load(), path)
        fc = tensors.get("fc.weight")
        if fc is None:
            raise DraftlabError("has no fc.weight (the 3 x target hidden -> hidden fusion)", path=path)
        embed = _choose_embedding(config, tensors, target, use_target_embedding, path)
        bias = "midlayer.self_attn.q_proj.bias" in tensors
        drafter = cls(config, embed_tokens=embed, fc_in=fc.shape[1], bias=bias, windows=windows)
        if "lm_head.weight" not in tensors:
            if config.tie_word_embeddings:
                tensors["lm_head.weight"] = drafter.embed_tokens.weight
            elif not config.draft_vocab_size_set and target is not None:
                tensors["lm_head.weight"] = target.lm_head.weight
            else:
                raise DraftlabError("has no lm_head.weight", path=path)
        if embed is not None:
            tensors.pop("embed_tokens.weight", None)
        drafter._load_tensors(tensors, path)
        return drafter.place(parse_dtype(dtype), parse_device(device), keep_embedding=embed is not None).eval()

    def place(self, dtype: torch.dtype, device: torch.device, *, keep_embedding: bool = False) -> Eagle3Drafter:
        """Move to ``device`` and cast weights to ``dtype``; RoPE frequencies stay float32, and a shared
        (target's) embedding is left where and as it is."""
        for module in self.children():
            if module is self.embed_tokens and keep_embedding:
                continue
            module.to(device=device, dtype=None if module is self.rotary else dtype)
        self.d2t = self.d2t.to(device)
        return self

    def _load_tensors(self, tensors: dict[str, torch.Tensor], path: Path) -> None:
        own = {k: v for k, v in self.state_dict().items() if not k.startswith("embed_tokens.")}
        if "embed_tokens.weight" in tensors:
            own["embed_tokens.weight"] = self.embed_tokens.weight
        missing = sorted(set(own) - set(tensors) - {"d2t"})
        unexpected = sorted(set(tensors) - set(own))
        if missing or unexpected:
            what = f"lacks tensor {missing[0]!r}" if missing else f"has unexpected tensor {unexpected[0]!r}"
            qwen3 = any(n.endswith(("q_norm.weight", "k_norm.weight")) for n in unexpected)
            hint = ("; per-head q/k norms are a Qwen3-architecture drafter's, which its config names with "
                    "transformer_layer_config.model_type: qwen3 (speculators' layout)") if qwen3 else ""
            raise DraftlabError(f"{what} for a {self.config.num_layers}-layer {self.config.layer_kind} EAGLE-3 "
                                f"drafter{hint}", path=path)
        for name, tensor in tensors.items():
            if tensor.shape != own[name].shape:
                raise DraftlabError(f"tensor {name!r} has shape {list(tensor.shape)}; the config implies "
                                    f"{list(own[name].shape)}", path=path)
        with torch.no_grad():
            for name, tensor in tensors.items():
                own[name].copy_(tensor)

    # --- the drafter's own KV cache (batch 1) ---

    def use_static_cache(self, max_len: int, *, graphs: bool | None = None, compile: bool = False) -> Eagle3Drafter:
        """Switch :meth:`forward` to a preallocated cache of ``max_len`` entries; steps of up to 64
        tokens run as CUDA graphs per bucket (default: on CUDA), with the work around attention
        torch.compiled when ``compile`` (:meth:`forward_masked`). Call after :meth:`place`."""
        weight = self.lm_head.weight
        on_cuda = weight.device.type == "cuda"
        if graphs and not on_cuda:
            raise DraftlabError("CUDA graphs need the drafter on a CUDA device")
        if max_len < 1:
            raise DraftlabError(f"max_len must be >= 1; got {max_len}")
        attn = self.midlayer.self_attn
        self._static = StaticKV(self.config.num_layers, attn.kv_heads, attn.head_dim, max_len + BUCKETS[-1],
                                dtype=weight.dtype, device=weight.device)
        self._max_len = max_len
        self._compile = compile
        self._run_bucket = GraphSteps(self._static_step) if (on_cuda if graphs is None else graphs) \
            else self._static_step
        self.reset()
        return self

    def _static_step(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
                     slots: torch.Tensor, tree: torch.Tensor, read: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """b entries written to ``slots`` of the static cache, which reads ``read`` (``StaticKV.reads``);
        tree [b, b] bool. Logits and pre-norm output."""
        kv = self._static
        kv.begin(slots, positions, read)
        mask = kv.allowed(slots, positions, tree, None)[None]
        inputs = input_ids[None], hidden[None], positions[None], mask, kv
        try:
            logits, out, _ = self.forward_masked(*inputs, compiled=self._compile)
        except Exception as exc:
            if not (self._compile and compile_failed(exc)):
                raise
            say_uncompiled("the drafter's step", exc)  # the rerun writes the step's slots over
            self._compile = False
            logits, out, _ = self.forward_masked(*inputs)
        return logits[0], out[0]

    def _forward_static(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
                        tree: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, cached = input_ids.numel(), self._cached
        self._check_room(cached + n)
        b = bucket(n)
        device = input_ids.device
        if b is None:
            with attention_kernels():  # a long step's shape does not recur
                return self._static_step(input_ids, hidden, positions, torch.arange(cached, cached + n, device=device),
                                         tree, self._static.reads(cached + n))
        logits, out = self._bucketed(input_ids, hidden, positions, tree, cached, cached)
        return logits.clone(), out.clone()

    def _bucketed(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, tree: torch.Tensor,
                  cached: int | torch.Tensor, bound: int) -> tuple[torch.Tensor, torch.Tensor]:
        """n <= 64 entries written after ``cached`` (a host count, or one held on the device, [1]), padded to
        their bucket and run through its step (on CUDA its graph, the n rows written into the graph's own
        buffers); ``bound`` >= ``cached`` on the host sets the read width. Views of the step's outputs for
        the n entries."""
        n = input_ids.numel()
        b = bucket(n)
        slots, read = cached + self._static.slot_ids[:b], self._static.reads(bound + b)
        if isinstance(self._run_bucket, GraphSteps):  # the n rows written into the graph's own buffers
            def padded() -> tuple[torch.Tensor, ...]:  # the bucket's inputs, made only to capture its graph
                ids, at, square, rows = pad_to_bucket(b, input_ids, positions, tree, hidden)
                return ids, rows, at, slots, square, read
            walled = tree if n == b else torch.nn.functional.pad(tree, (0, b - n))  # no real row sees a pad
            logits, out = self._run_bucket.narrow((b, hidden.shape[-1], read.numel()),
                                                  (input_ids, hidden, positions, slots, walled, read), padded)
        else:
            ids, positions, tree, hidden = pad_to_bucket(b, input_ids, positions, tree, hidden)
            logits, out = self._run_bucket(ids, hidden, positions, slots, tree, read)
        return logits[:n], out[:n]

    def _check_room(self, end: int) -> None:
        if end > self._max_len:
            raise DraftlabError(f"the drafter's static KV cache holds {self._max_len} entries and would need "
                                f"{end}; use a larger max_len")

    @property
    def max_len(self) -> int | None:
        """Entries the static cache holds; None without one."""
        return self._max_len if self._static is not None else None

    @property
    def graphs(self) -> bool:
        """Whether the static cache's steps run as CUDA graphs."""
        return self._static is not None and isinstance(self._run_bucket, GraphSteps)

    def tree_reads(self, cached: int, n: int) -> torch.Tensor:
        """The ``read`` of a :meth:`tree_pass` over ``n`` nodes after ``cached`` entries (the slots its
        bucket's step reads), the room for them checked."""
        self._check_room(cached + n)
        return self._static.reads(cached + bucket(n))

    def tree_pass(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, tree: torch.Tensor,
                  cached: torch.Tensor, read: torch.Tensor) -> DraftStep:
        """The static cache's step over n draft nodes written after ``cached`` entries ([1], on the device,
        so that a CUDA graph of a whole draft serves every cycle), reading ``read`` (:meth:`tree_reads`):
        what :meth:`forward` and ``keep`` of nothing compute, run directly (no graph of its own, no
        bookkeeping on the host). The cache length stays; the slots written are past it."""
        n = input_ids.numel()
        b = bucket(n)
        input_ids, positions, tree, hidden = pad_to_bucket(b, input_ids, positions, tree,
                                                           hidden.to(self.lm_head.weight.dtype))
        logits, out = self._static_step(input_ids, hidden, positions, cached + self._static.slot_ids[:b], tree, read)
        return DraftStep(logits=logits[:n], hidden=out[:n])

    def extend_at(self, input_ids: torch.Tensor, hidden: torch.Tensor, cached: torch.Tensor, bound: int) -> DraftStep:
        """:meth:`forward` of up to 64 causal entries written after ``cached`` entries counted on the device
        ([1]), with no bookkeeping on the host: the pipelined decoder's draft-extend. ``bound`` (the
        host's upper bound on ``cached``) sets the read width and is checked against the room. Entries
        past the ones a caller counts are written past its new length, where no later step sees them."""
        n = input_ids.numel()
        self._check_room(bound + n)
        weight = self.lm_head.weight
        causal = torch.ones(n, n, dtype=torch.bool, device=weight.device).tril()
        logits, out = self._bucketed(input_ids, hidden.to(weight.dtype), cached + self._static.slot_ids[:n], causal,
                                     cached, bound)
        return DraftStep(logits=logits.float(), hidden=out)

    def reset(self) -> None:
        """Empty the KV cache (start a new prompt)."""
        self._kv: list[KV] | None = None
        self._positions: torch.Tensor | None = None  # the dynamic cache's entries' positions (for windows)
        self._cached = 0
        self._last_new = 0

    @property
    def cache_len(self) -> int:
        return self._cached

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, *, positions: torch.Tensor | None = None,
                tree_mask: torch.Tensor | None = None) -> DraftStep:
        """Run n new entries after the cached ones and append them to the cache.

        ``input_ids`` [n] target token ids; ``hidden`` [n, 3T] target features (fc is applied) or
        [n, H] the drafter's own previous outputs. ``positions`` default to ``cache_len + arange(n)``;
        ``tree_mask`` [n, n] bool says which new entries each may attend to (None = causal).
        """
        device = self.lm_head.weight.device
        n = input_ids.numel()
        if positions is None:
            positions = torch.arange(self._cached, self._cached + n, device=device)
        if self._static is not None:
            dtype = self.lm_head.weight.dtype
            logits, out = self._forward_static(input_ids.reshape(n).to(device), hidden.reshape(n, -1).to(device, dtype),
                                               positions.reshape(n).to(device), new_token_mask(n, tree_mask, device))
            self._cached += n
            self._last_new = n
            return DraftStep(logits=logits.float(), hidden=out)
        mask = attention_mask(self._cached, tree_mask, n, device)
        earlier = self._positions if self._positions is not None else positions.new_zeros(0).to(device)
        self._positions = torch.cat([earlier, positions.reshape(n).to(device)])
        with attention_kernels():
            logits, out, kv = self.forward_masked(input_ids.reshape(1, n), hidden.reshape(1, n, -1),
                                                  positions.reshape(1, n), mask[None], self._kv,
                                                  key_positions=self._positions[None])
        self._kv = kv if self._kv is None else [
            (torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)) for (pk, pv), (k, v) in zip(self._kv, kv)]
        self._cached += n
        self._last_new = n
        return DraftStep(logits=logits[0].float(), hidden=out[0])

    def keep(self, indices: torch.Tensor) -> None:
        """Of the entries the last forward appended, keep ``indices`` (in that order) right after the prefix."""
        start = self._cached - self._last_new
        if self._kv is None and self._static is None:
            return
        device = self._static.positions.device if self._static is not None else self._kv[0][0].device
        indices = indices.reshape(-1).to(device, torch.long)
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= self._last_new):
            raise DraftlabError(f"keep() indices must lie in 0..{self._last_new - 1} (the last forward's entries)")
        if self._static is not None:
            if indices.numel():
                self._static.keep(start, indices)
        else:
            full = torch.cat([torch.arange(start, device=device), start + indices])
            self._kv = [(k.index_select(2, full), v.index_select(2, full)) for k, v in self._kv]
            self._positions = self._positions.index_select(0, full)
        self._cached = start + indices.numel()
        self._last_new = indices.numel()

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` cached entries (drop draft steps, before a draft-extend)."""
        if not 0 <= length <= self._cached:
            raise DraftlabError(f"crop() length must lie in 0..{self._cached}; got {length}")
        if self._kv is not None:
            self._kv = [(k[:, :, :length], v[:, :, :length]) for k, v in self._kv]
            self._positions = self._positions[:length]
        self._cached = length
        self._last_new = 0

    # --- the batched, cache-free computation both paths share ---

    def forward_masked(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
                       mask: torch.Tensor, past: list[KV] | Preallocated | None = None, *, compiled: bool = False,
                       key_positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, list[KV]]:
        """input_ids [B, n], hidden [B, n, 3T or H], positions [B, n], mask [B, n, S] bool over the
        ``past`` keys (S - n of them, per layer) then the n new ones (over the slots a StaticKV, B = 1,
        or a BatchKV reads, which this writes), narrowed per layer to its window (:attr:`windows`) by the
        keys' positions ``key_positions`` [B or 1, S] (needed with a window over a list of keys or a
        BatchKV; without a past they are ``positions``, over a StaticKV its slots'). Returns float32 logits
        [B, n, Vd],
        the hidden the next draft step receives [B, n, H] (:meth:`finish`) and each layer's new
        keys/values. ``compiled``: the work around attention through torch.compile (the same math,
        rounded where eager rounds; for inference: the compiled parts are not differentiated)."""
        device, dtype = self.lm_head.weight.device, self.lm_head.weight.dtype
        embed_device = self.embed_tokens.weight.device
        embeds = self.embed_tokens(input_ids.to(embed_device)).to(device, dtype)
        hidden = hidden.to(device, dtype)
        if hidden.shape[-1] != self.config.hidden_size:
            if hidden.shape[-1] != self.fc.in_features:
                raise DraftlabError(f"drafter got hidden states of width {hidden.shape[-1]}; expected "
                                    f"{self.fc.in_features} (target features) or {self.config.hidden_size}")
            hidden = _part(_combine, compiled)(self, hidden)
        rope = _part(_rope, compiled)(self, hidden, positions.to(device))
        masks = self._layer_masks(mask.to(device), positions.to(device), past, key_positions)
        static = past if isinstance(past, Preallocated) else None
        out, residual, kv0 = self.midlayer(embeds, hidden, rope, static or (past[0] if past else None), masks[0],
                                           compiled)
        new = [kv0]
        for i, layer in enumerate(self.additional_layers, start=1):
            out, residual, kv = layer(out, rope, static or (past[i] if past else None), masks[i], i, compiled)
            new.append(kv)
        return (*_part(_head, compiled)(self, out, residual), new)

    def _layer_masks(self, mask: torch.Tensor, positions: torch.Tensor, past: list[KV] | Preallocated | None,
                     key_positions: torch.Tensor | None) -> list[torch.Tensor]:
        """Each layer's mask: ``mask`` without keys its window or more positions behind the query (one
        tensor per distinct window; the same tensor for every layer when none has a window)."""
        if all(window is None for window in self.windows):
            return [mask] * len(self.windows)
        if key_positions is None:
            if isinstance(past, StaticKV):
                key_positions = past.positions[:past.read.numel()][None]
            elif past is None:
                key_positions = positions
            else:
                raise ValueError("a sliding-window drafter's pass over earlier keys needs their key_positions")
        key_positions = key_positions.to(mask.device)
        by_window = {w: apply_window(mask, positions, key_positions, w) for w in dict.fromkeys(self.windows)}
        return [by_window[w] for w in self.windows]

    def combine(self, features: torch.Tensor) -> torch.Tensor:
        """Target features [..., A x T] -> the layer's hidden input [..., H]: the variant's norms in the engines'
        order (``input_norm`` over the whole concatenation with norm_before_fc, then one ``fc_norm`` per aux
        feature with EAGLE-3.1's fc_norm), then ``fc``."""
        for flag in FEATURE_NORMS:
            norm = getattr(self, flag.module)
            if isinstance(norm, nn.ModuleList):
                chunks = features.chunk(len(norm), dim=-1)
                features = torch.cat([n(c) for n, c in zip(norm, chunks, strict=True)], dim=-1)
            elif norm is not None:
                features = norm(features)
        return self.fc(features)

    def finish(self, pre_norm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's output -> float32 logits from norm(out), and the hidden the next draft step receives
        (:meth:`head_input`)."""
        normed, hidden = self.head_input(pre_norm)
        return self.lm_head(normed).float(), hidden

    def head_input(self, pre_norm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's output -> norm(out), which ``lm_head`` reads, and the hidden the next draft step
        receives: norm(out) with ``norm_output`` (EAGLE-3.1, as the engines serve it), else out itself."""
        normed = self.norm(pre_norm)
        return normed, normed if self.variant.norm_output else pre_norm

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Target token ids of draft-vocabulary ids: ``draft_ids + d2t[draft_ids]``."""
        d2t = self.d2t.to(draft_ids.device)
        return draft_ids + d2t[draft_ids]

    def checkpoint_tensors(self) -> dict[str, torch.Tensor]:
        """The tensors SpecForge saves (its names; no embedding, which serving takes from the target)."""
        return {k: v for k, v in self.state_dict().items()
                if not k.startswith(("embed_tokens.", "rotary."))}


def _combine(drafter: Eagle3Drafter, features: torch.Tensor) -> torch.Tensor:
    """Target features -> the first layer's hidden input (:meth:`Eagle3Drafter.combine`)."""
    return drafter.combine(features)


def _rope(drafter: Eagle3Drafter, hidden: torch.Tensor, positions: torch.Tensor) -> CosSin:
    """RoPE's cos and sin at ``positions`` (in ``hidden``'s dtype)."""
    return drafter.rotary(hidden, positions)


def _head(drafter: Eagle3Drafter, m: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The last layer's MLP output and residual -> :meth:`Eagle3Drafter.finish` of their sum."""
    return drafter.finish(m + residual)


def _feature_norm(flag: VariantFlag, fc_in: int, num_aux: int, eps: float) -> nn.Module:
    """The norm a variant flag adds before fc: one RMSNorm per aux feature, or one over their concatenation."""
    if flag.per_aux:
        return nn.ModuleList(LlamaRMSNorm(fc_in // num_aux, eps) for _ in range(num_aux))
    return LlamaRMSNorm(fc_in, eps)


def checked_windows(config: DrafterConfig, windows: tuple[int | None, ...] | None) -> tuple[int | None, ...]:
    """Each layer's sliding window: ``windows`` when given (the engine's, checked: one per layer, each None or
    a positive int), else the config's; None for every layer of a config that states none."""
    if windows is None:
        return tuple(config.layer_windows) or (None,) * config.num_layers
    windows = tuple(windows)
    if len(windows) != config.num_layers or any(w is not None and (type(w) is not int or w < 1) for w in windows):
        raise DraftlabError(f"the drafter's windows {list(windows)} do not give each of its {config.num_layers} "
                            "layer(s) None (full attention) or a positive window")
    return windows


def refuse_unsupported(ckpt: Checkpoint) -> None:
    """Raise naming the first key or tensor of the drafter that draftlab would compute wrong."""
    problems = unsupported(ckpt.config, ckpt.tensors)
    if problems:
        more = f" (and {len(problems) - 1} more; draftlab check lists them)" if len(problems) > 1 else ""
        raise DraftlabError(f"{problems[0].message}{more}", path=ckpt.path)


def _llama_config(config: DrafterConfig) -> LlamaConfig:
    """A LlamaConfig carrying the drafter layer's sizes and RoPE (for transformers' MLP and rotary code)."""
    fields = copy.deepcopy(config.layer_config)  # transformers edits rope dicts in place (adds rope_theta)
    fields.update(hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
                  num_attention_heads=config.num_attention_heads, num_key_value_heads=config.num_key_value_heads,
                  head_dim=config.head_dim, rms_norm_eps=config.rms_norm_eps,
                  vocab_size=config.vocab_size, num_hidden_layers=config.num_layers)
    for key in ("architectures", "eagle_config", "speculators_config", "transformer_layer_config", "auto_map"):
        fields.pop(key, None)
    return LlamaConfig.from_dict(fields)


def _choose_embedding(config: DrafterConfig, tensors: dict[str, torch.Tensor], target: TargetRunner | None,
                      use_target_embedding: bool, path: Path) -> nn.Embedding | None:
    """The target's embedding module (shared), or None to use the checkpoint's own."""
    same_width = config.target_hidden_size == config.hidden_size
    if use_target_embedding and target is not None and same_width:
        if target.embed_tokens.weight.shape != (config.vocab_size, config.hidden_size):
            raise DraftlabError(f"the target's embedding is {list(target.embed_tokens.weight.shape)}; the drafter "
                                f"expects [{config.vocab_size}, {config.hidden_size}]", path=path)
        return target.embed_tokens
    if "embed_tokens.weight" not in tensors:
        reason = "pass the target to share its embedding, as SGLang does" if same_width else \
            "its hidden size differs from the target's, so SGLang would not share the target's either"
        raise DraftlabError(f"has no embed_tokens.weight; {reason}", path=path)
    return None
