"""The target's fast path: a static KV cache and one step function run as CUDA graphs per bucket.

The step walks the HF model's own modules (embedding, rotary, decoder layers, final norm, head), so
the weights are HF's (and the per-family layer code, or its fused equivalent below); it returns the aux layer outputs explicitly
instead of through hooks, which keeps it capturable. Token counts up to the largest bucket are padded
to a bucket (padding rows write slots past the new cache length, which the next step overwrites and
no mask lets through); longer inputs (a prefill) run the same step uncaptured.

:class:`LayerWalk` is that walk over any cache with the HF ``update``; the batched target
(:mod:`draftlab.models.target_batch`) runs it over a :class:`~draftlab.models.static_kv.BatchKV`.
Both run the decoder layers as :class:`~draftlab.models.fused_layer.FusedLayer` (fused QKV and
gate_up GEMMs over the same weights) for the SiLU-gated families, as HF's modules otherwise.

Static mode points the model's attention at draftlab's function over the static cache;
:meth:`StaticTarget.own_attention` gives the model its own attention back for a pass that does not
use the cache (the runner's batched, cache-free ``forward_batch``), so one loaded model serves both.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from transformers import PreTrainedModel
from transformers.modeling_utils import AttentionInterface

from draftlab.errors import DraftlabError
from draftlab.models.fused_layer import FusedLayer, fusable
from draftlab.models.graphs import BUCKETS, GraphSteps, bucket, pad_to_bucket
from draftlab.models.kernels import attention_kernels, compile_failed, say_uncompiled
from draftlab.models.static_kv import StaticKV, additive, hf_attention

ATTENTION = "draftlab_static"
AttentionInterface.register(ATTENTION, hf_attention)

# dense decoder layers whose attention is plain (GQA) softmax attention: what gqa_attention computes
FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def supports(model: PreTrainedModel) -> bool:
    return getattr(model.config, "model_type", None) in FAMILIES


def cache_keyword(forward: Callable[..., object]) -> str:
    """The KV-cache keyword of an HF forward: "cache" in transformers >= 5.2x, "past_key_values" before."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


class LayerWalk:
    """The HF model's own modules run by hand over a cache draftlab owns: embedding, rotary, every
    decoder layer (with the mask of its attention kind), final norm. The aux layers' outputs are
    returned explicitly instead of through hooks, which keeps a step capturable as a CUDA graph.

    ``fused`` (for SiLU-gated models): the decoder layers run as :class:`FusedLayer` (one QKV and one
    gate_up GEMM each, the same weights' memory) instead of as HF's modules."""

    def __init__(self, model: PreTrainedModel, aux_layers: list[int], windows: dict[str, int | None], *,
                 fused: bool = True) -> None:
        self.model, self.decoder, self.aux_layers = model, model.get_decoder(), aux_layers
        self.layers = list(self.decoder.layers)
        layer_types = getattr(model.config, "layer_types", None) or ["all"] * len(self.layers)
        self.layer_kinds = [kind if kind in windows else next(iter(windows)) for kind in layer_types]
        self.cache_arg = cache_keyword(self.layers[0].forward)
        self.fused = [FusedLayer(layer) for layer in self.layers] if fused and fusable(model) else None

    def kv_shape(self) -> tuple[int, int]:
        """(kv_heads, head_dim) of the layers' attention."""
        attn = self.layers[0].self_attn
        return attn.k_proj.out_features // attn.head_dim, attn.head_dim

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, masks: dict[str, torch.Tensor | None],
                 cache: object | None, *, aux: bool = True,
                 compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """ids/positions [B, n], one mask per attention kind; ``cache`` has the HF ``update``. Returns
        the final (post-norm) hidden states [B, n, H] and the aux features [B, n, len(aux) * H] (None
        when ``aux`` is False). ``compiled``: the fused layers' elementwise parts torch.compiled."""
        hidden = self.model.get_input_embeddings()(ids)
        cos, sin = self.decoder.rotary_emb(hidden, positions)
        captured: dict[int, torch.Tensor] = {}
        wanted = set(self.aux_layers) if aux else set()
        for i, layer in enumerate(self.layers):
            mask = masks[self.layer_kinds[i]]
            if self.fused is not None:
                hidden = self.fused[i](hidden, cos, sin, mask, cache, compiled)
            else:
                out = layer(hidden, attention_mask=mask, position_ids=positions, position_embeddings=(cos, sin),
                            use_cache=True, **{self.cache_arg: cache})
                hidden = out[0] if isinstance(out, tuple) else out
            if i in wanted:
                captured[i] = hidden
        features = None
        if aux:  # no aux layers (plain decoding): an empty feature width
            features = (torch.cat([captured[k] for k in self.aux_layers], dim=-1) if self.aux_layers
                        else hidden.new_zeros(*hidden.shape[:-1], 0))
        return self.decoder.norm(hidden), features

    def causal(self, ids: torch.Tensor, *, compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """A cache-free causal pass over ids [B, L] (the fused layers only; no sliding window in reach):
        the final hidden states and the aux features, as :meth:`__call__` returns them."""
        if self.fused is None:
            raise DraftlabError("the cache-free walk needs the fused layers (a SiLU-gated target)")
        positions = torch.arange(ids.shape[1], device=ids.device)[None].expand(ids.shape[0], -1)
        return self(ids, positions, dict.fromkeys(self.layer_kinds), None, compiled=compiled)


@contextmanager
def static_attention(model: PreTrainedModel) -> Iterator[None]:
    """The model's attention layers call draftlab's (:func:`~draftlab.models.static_kv.hf_attention`,
    which reads a cache draftlab owns, with draftlab's masks) for the duration."""
    own = model.config._attn_implementation
    model.config._attn_implementation = ATTENTION
    try:
        yield
    finally:
        model.config._attn_implementation = own


class StaticTarget:
    """Runs steps of ``model`` over a :class:`StaticKV` of ``max_len`` entries."""

    def __init__(self, model: PreTrainedModel, aux_layers: list[int], windows: dict[str, int | None],
                 *, max_len: int, graphs: bool, compile: bool = False) -> None:
        """``compile``: the bucketed steps run the fused layers' elementwise parts torch.compiled; a
        longer step (a prefill, whose shape does not recur) runs them eager. On an H200 it takes the
        8B verify of a 3/1/4 cycle from 7.65 to 5.55 ms, for a few seconds of compiling per process, so
        ``generate`` turns it on for long decodes only (``decode_steps``, ``compile_pays``). The compiled parts round as
        the eager ones do (bit for bit at 1 and 4 rows on an H200: benchmarks/compile_numerics.py), so
        the probe's eager pass still computes what a compiled verify does."""
        if not supports(model):
            raise DraftlabError(f"the static cache supports the families {', '.join(FAMILIES)}; this target is "
                                f"{getattr(model.config, 'model_type', '?')!r} (use the dynamic cache)")
        self.model, self.walk, self.windows = model, LayerWalk(model, aux_layers, windows), windows
        embed = model.get_input_embeddings().weight
        self.max_len = max_len
        self.kv = StaticKV(len(self.walk.layers), *self.walk.kv_shape(), max_len + BUCKETS[-1],
                           dtype=embed.dtype, device=embed.device)
        self.hf_attention = model.config._attn_implementation  # the model's own, for own_attention()
        model.config._attn_implementation = ATTENTION
        self.dtype = embed.dtype
        self.compile = compile
        self.graphs = graphs
        self.run_bucket = GraphSteps(self.step) if graphs else self.step

    def step(self, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, tree: torch.Tensor,
             read: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One bucketed forward of b tokens written to ``slots``, reading ``read`` (``StaticKV.reads``);
        tree [b, b] bool. Returns float32 logits [b, V] and the aux features [b, len(aux) * hidden]."""
        return self._forward(ids, positions, slots, tree, read, self.compile)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, tree: torch.Tensor,
                 read: torch.Tensor, compiled: bool) -> tuple[torch.Tensor, torch.Tensor]:
        self.kv.begin(slots, positions, read)
        masks = {kind: additive(self.kv.allowed(slots, positions, tree, window), self.dtype)
                 for kind, window in self.windows.items()}
        hidden, aux = self.walk(ids[None], positions[None], masks, self.kv, compiled=compiled)
        return self.model.get_output_embeddings()(hidden)[0].float(), aux[0]

    def _bucket_step(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A bucketed step. Where torch.compile cannot build the layers' parts (it fails on the first
        call, before a graph is captured), the steps go on without them, exact and slower, and say so
        once; the failed step wrote only what its rerun writes again."""
        try:
            return self.run_bucket(*inputs)
        except Exception as exc:
            if not (self.compile and compile_failed(exc)):
                raise
            say_uncompiled("the target's step", exc)
        self.compile = False
        self.run_bucket = GraphSteps(self.step) if self.graphs else self.step
        return self.run_bucket(*inputs)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, tree: torch.Tensor,
                cached: int) -> tuple[torch.Tensor, torch.Tensor]:
        """n new tokens after ``cached`` entries; tree [n, n] bool. Returns logits and aux for the n."""
        n = input_ids.numel()
        self._check_room(cached + n)
        if bucket(n) is None:
            slots = torch.arange(cached, cached + n, device=input_ids.device)
            with attention_kernels():  # a long step's shape does not recur
                return self._forward(input_ids, positions, slots, tree, self.kv.reads(cached + n), False)
        logits, aux = self.forward_at(input_ids, positions, tree, cached, cached)
        return logits.clone(), aux.clone()

    def forward_at(self, input_ids: torch.Tensor, positions: torch.Tensor, tree: torch.Tensor,
                   cached: int | torch.Tensor, bound: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` of up to 64 tokens after ``cached`` entries, which the pipelined decoder counts on
        the device ([1]) so that nothing waits for the host: the slots follow ``cached``, and ``bound``
        (the host's upper bound on it) sets the read width and is checked against the room. Returns
        views of the step's outputs, valid until the next step of the same bucket."""
        n = input_ids.numel()
        self._check_room(bound + n)
        b = bucket(n)
        input_ids, positions, tree = pad_to_bucket(b, input_ids, positions, tree)
        logits, aux = self._bucket_step(input_ids, positions, cached + self.kv.slot_ids[:b], tree,
                                        self.kv.reads(bound + b))
        return logits[:n], aux[:n]

    def _check_room(self, end: int) -> None:
        if end > self.max_len:
            raise DraftlabError(f"the static KV cache holds {self.max_len} entries and would need {end}; "
                                f"load the target with a larger max_len")

    def keep(self, start: int | torch.Tensor, indices: torch.Tensor) -> None:
        self.kv.keep(start, indices)

    @contextmanager
    def own_attention(self) -> Iterator[None]:
        """The model's own attention (and its own masks) for the duration: a pass over any batch that
        neither reads nor writes the static cache."""
        self.model.config._attn_implementation = self.hf_attention
        try:
            yield
        finally:
            self.model.config._attn_implementation = ATTENTION
