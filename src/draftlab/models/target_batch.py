"""The target over B sequences at once: one forward verifies every row's draft tree.

Rows share one KV cache of [B, heads, slots, head_dim]; which slots hold real entries is
:class:`~draftlab.models.batch_slots.BatchSlots`' job, and the attention mask it builds goes to the
layers as a ready 4D additive mask with explicit positions (as
:class:`~draftlab.models.target.TargetRunner` does for one row).

For the families the static cache supports (:data:`~draftlab.models.target_static.FAMILIES`: llama,
mistral, qwen2, qwen3) on one device, the cache is a :class:`~draftlab.models.static_kv.BatchKV` of
``capacity`` slots per row, allocated once and written in place, and the forward walks the HF layers
by hand (:class:`~draftlab.models.target_static.LayerWalk`, aux returned explicitly). A forward of up
to 64 tokens is widened to a token-count bucket (:mod:`draftlab.models.graphs`) and, on CUDA, replays
as the CUDA graph of its (token bucket, read bucket): eager, a batched pass of an 8B model is bound by
the host's ~1,000 kernel launches, not by the GPU. Other families,
and a model split across devices, keep the HF path: a ``DynamicCache`` that grows by concatenation,
aux from the runner's forward hooks (``TargetRunner.hf_pass``). Either way a runner in static mode
lends its model for these passes, its own static cache untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from draftlab.errors import DraftlabError
from draftlab.models.batch_slots import BatchSlots, gather_slots, pad_block
from draftlab.models.devices import model_devices
from draftlab.models.graphs import BUCKETS, GraphSteps, bucket
from draftlab.models.kernels import attention_kernels
from draftlab.models.static_kv import BatchKV
from draftlab.models.target import TargetRunner
from draftlab.models.target_static import LayerWalk, static_attention, supports


@dataclass
class BatchTargetStep:
    logits: torch.Tensor  # [B, n, V] float32 (n = 1 with last_only)
    aux: torch.Tensor  # [B, n, len(aux_layers) * hidden], model dtype


class BatchTarget:
    """B sequences of one target over a shared, padded KV cache of ``capacity`` slots per row."""

    def __init__(self, runner: TargetRunner, batch_size: int, capacity: int, *,
                 read_bucket: int = BatchKV.READ_BUCKET) -> None:
        """``read_bucket``: the slot count a forward's reads round up to; each one up to the capacity is
        a CUDA graph of its own, so a caller that decodes the whole capacity (the probe's continuations)
        may read all of it every step and capture one graph instead of one per 128 slots."""
        if batch_size < 1:
            raise DraftlabError(f"batch size must be >= 1, got {batch_size}")
        if capacity < 1:
            raise DraftlabError(f"the batched KV cache needs a capacity >= 1 slot per row, got {capacity}")
        self.runner = runner
        self.batch_size = batch_size
        self.capacity = capacity
        self.config = runner.config
        self.device = runner.device
        model = runner.model
        self._walk: LayerWalk | None = None
        self._kv: BatchKV | None = None
        if supports(model) and len(model_devices(model)) == 1:
            self._walk = LayerWalk(model, runner.aux_layers, runner._windows)
            self._kv = BatchKV(len(self._walk.layers), batch_size, *self._walk.kv_shape(), capacity,
                               dtype=runner.dtype, device=self.device, read_bucket=read_bucket)
            self._run_bucket = GraphSteps(self._step) if self.device.type == "cuda" else self._step
        self.reset()

    @property
    def static(self) -> bool:
        """Whether the cache is preallocated (a :class:`BatchKV`) rather than an HF ``DynamicCache``."""
        return self._kv is not None

    def reset(self) -> None:
        """Empty every row's cache."""
        self._cache = None if self.static else DynamicCache()
        self.slots = BatchSlots(self.batch_size, self.device)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, *, tree_mask: torch.Tensor | None = None,
                new_valid: torch.Tensor | None = None, last_only: bool = False) -> BatchTargetStep:
        """Append n entries to every row: ``input_ids``/``positions`` [B, n], ``tree_mask`` [B, n, n]
        bool (None = causal), ``new_valid`` [B, n] False for padding. ``last_only``: logits of the last
        column only (a left-padded prefill)."""
        input_ids, positions = input_ids.to(self.device), positions.to(self.device, torch.long)
        if new_valid is None:
            new_valid = torch.ones(input_ids.shape, dtype=torch.bool, device=self.device)
        limit = self.config.max_position_embeddings
        if limit is not None and int(positions.max()) >= limit:
            raise DraftlabError(f"position {int(positions.max())} is past the target's context of {limit} tokens")
        n = input_ids.shape[1]
        if self._kv is not None:
            hidden, aux = self._static_forward(input_ids, positions, tree_mask, new_valid)
            logits = self.runner.lm_head(hidden[:, n - 1:n] if last_only else hidden).float()
        else:
            logits, aux = self._hf_forward(input_ids, positions, tree_mask, new_valid, last_only)
        self.slots.append(positions, new_valid)
        return BatchTargetStep(logits=logits, aux=aux)

    def _static_forward(self, input_ids: torch.Tensor, positions: torch.Tensor, tree_mask: torch.Tensor | None,
                        new_valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward over the :class:`BatchKV`: widened to a token-count bucket and run as that
        bucket's step (a CUDA graph on CUDA), or, longer than every bucket, run as it is. Returns the
        final hidden states and aux features of the n real entries."""
        n, start = input_ids.shape[1], self.slots.length
        self._kv.check(start, n)
        width = bucket(n) or n
        positions_b, valid_b, tree_b, ids_b = pad_block(width, positions, new_valid, tree_mask, input_ids)
        masks = [self._additive(self._kv.pad(self.slots.allowed(positions_b, tree_b, valid_b, window)))
                 for window in self.runner._windows.values()]
        slots = torch.arange(start, start + width, device=self.device)
        if width > BUCKETS[-1]:
            with attention_kernels():  # a shape that does not recur
                hidden, aux = self._step(ids_b, positions_b, slots, *masks)
        else:
            hidden, aux = self._run_bucket(ids_b, positions_b, slots, *masks)
        return hidden[:, :n], aux[:, :n].clone()

    def _step(self, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
              *masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward writing ``slots`` of every row; one additive mask per attention kind, in the
        runner's order. Returns the final hidden states [B, n, H] and aux features."""
        self._kv.begin(slots, masks[0].shape[-1])
        with static_attention(self.runner.model):
            return self._walk(ids, positions, dict(zip(self.runner._windows, masks)), self._kv)

    def _hf_forward(self, input_ids: torch.Tensor, positions: torch.Tensor, tree_mask: torch.Tensor | None,
                    new_valid: torch.Tensor, last_only: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward through the HF model over its growing ``DynamicCache``. Returns logits and aux."""
        runner = self.runner
        masks = {kind: self._additive(self.slots.allowed(positions, tree_mask, new_valid, window))
                 for kind, window in runner._windows.items()}
        mask = next(iter(masks.values())) if len(masks) == 1 else masks
        with runner.hf_pass() as captured:
            out = runner.model(input_ids=input_ids, position_ids=positions, attention_mask=mask, use_cache=True,
                               logits_to_keep=1 if last_only else 0, **{runner.cache_arg: self._cache})
        aux = torch.cat([captured[k].to(self.device) for k in runner.aux_layers], dim=-1)
        return out.logits.float(), aux

    def keep(self, paths: list[list[int]]) -> None:
        """Of the entries the last forward appended, keep ``paths[b]`` in row b (the rest become padding)."""
        start = self.slots.block_start
        index = self.slots.keep(paths)
        if self._kv is not None:
            self._kv.keep(start, index)
            return
        for layer in self._cache.layers:
            if layer.is_initialized and layer.keys.numel():
                idx = index if isinstance(index, int) else index.to(layer.keys.device)
                layer.keys, layer.values = gather_slots(layer.keys, idx), gather_slots(layer.values, idx)

    def _additive(self, allowed: torch.Tensor) -> torch.Tensor:
        """[B, n, S] bool -> [B, 1, n, S] additive mask in the model's dtype."""
        out = torch.zeros(allowed.shape, dtype=self.runner.dtype, device=allowed.device)
        out.masked_fill_(~allowed, torch.finfo(self.runner.dtype).min)
        return out[:, None]
