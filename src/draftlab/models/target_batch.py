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

:meth:`BatchTarget.decode` is plain decoding (one token per row and step) without a host sync: over
the :class:`BatchKV` a step is the whole pass from token ids to the next token (lm_head, float cast,
argmax included; sampling takes the float logits) with the mask updated from fixed device buffers,
one CUDA graph per read bucket on CUDA; the walk's dense layers' elementwise parts compiled on CUDA
(``compile``, :mod:`draftlab.models.fused_layer`: on an H200 it takes the 8B shape's batch-64 step
from 2.03x to 1.48x its HBM floor, batch 1 from 1.68x to 1.32x; benchmarks/RESULTS.md). Compiling
costs seconds a process, so callers that know how long they decode ask :func:`compile_pays`.
Position limits are checked on the host from what the caller says (``forward``'s ``max_position``),
never by reading the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from draftlab.errors import DraftlabError
from draftlab.models.batch_slots import BatchSlots, gather_slots, pad_block
from draftlab.models.devices import model_devices
from draftlab.models.graphs import BUCKETS, GraphSteps, bucket
from draftlab.models.kernels import attention_kernels, compile_failed, say_uncompiled
from draftlab.models.static_kv import BatchKV
from draftlab.models.target import TargetRunner
from draftlab.models.target_static import LayerWalk, static_attention, supports

COMPILE_PAYS_AFTER = 3000
"""Decode steps from which torch.compile's layer parts pay for their set-up. On an H200 the probe's
compile and capture took 5.9 s against 1.0 s uncompiled on the 8B shape (3.4 s more on the toy pair,
inductor's on-disk cache warm), and compiling saves 1.4 ms a step at batch 1, 2.4 ms at batch 64
(benchmarks/RESULTS.md, "Decode at the HBM floor", session 12)."""


def compile_pays(steps: int, device: torch.device) -> bool:
    """Whether a decode of ``steps`` steps in all should compile its layers' parts (CUDA only)."""
    return device.type == "cuda" and steps >= COMPILE_PAYS_AFTER


@dataclass
class BatchTargetStep:
    logits: torch.Tensor  # [B, n, V] float32 (n = 1 with last_only)
    aux: torch.Tensor  # [B, n, len(aux_layers) * hidden], model dtype


class BatchTarget:
    """B sequences of one target over a shared, padded KV cache of ``capacity`` slots per row."""

    def __init__(self, runner: TargetRunner, batch_size: int, capacity: int, *,
                 read_bucket: int = BatchKV.READ_BUCKET, fused: bool = True, compile: bool | None = None) -> None:
        """``read_bucket``: the slot count a forward's reads round up to (each one a CUDA graph of its
        own). ``fused``: the dense families' layers run with one QKV and one gate_up GEMM
        (:mod:`draftlab.models.fused_layer`); ``compile``: :meth:`decode`'s steps run those layers'
        elementwise parts torch.compiled (inside draftlab's own CUDA graphs); None: on CUDA."""
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
        self.compile = self.device.type == "cuda" if compile is None else compile
        if supports(model) and len(model_devices(model)) == 1:
            self._walk = LayerWalk(model, runner.aux_layers, runner._windows, fused=fused)
            self._kv = BatchKV(len(self._walk.layers), batch_size, *self._walk.kv_shape(), capacity,
                               dtype=runner.dtype, device=self.device, read_bucket=read_bucket)
            on_cuda = self.device.type == "cuda"
            self._run_bucket = GraphSteps(self._step) if on_cuda else self._step
            # decode's fixed state: which slots each row attends to, and the position in each slot
            self._valid = torch.zeros(batch_size, self._kv.num_slots, dtype=torch.bool, device=self.device)
            self._key_positions = torch.zeros(batch_size, self._kv.num_slots, dtype=torch.long, device=self.device)
            self._slot_ids = torch.arange(self._kv.num_slots, device=self.device)
            self._decode_steps = self._step_runners()
        self.reset()

    def _step_runners(self) -> dict[bool, object]:
        """The decode steps, greedy (True) and with logits (False): CUDA graphs of them on CUDA."""
        on_cuda = self.device.type == "cuda"
        return {True: GraphSteps(self._greedy_step) if on_cuda else self._greedy_step,
                False: GraphSteps(self._logits_step) if on_cuda else self._logits_step}

    def _decode_step(self, greedy: bool, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step. Where torch.compile cannot build the layers' elementwise parts (it fails on
        the first call, before a graph is captured), decoding goes on without them, exact and slower,
        and says so once; the failed step wrote only what its rerun writes again."""
        try:
            return self._decode_steps[greedy](*inputs)
        except Exception as exc:
            if not (self.compile and compile_failed(exc)):
                raise
            say_uncompiled("the decode step", exc)
        self.compile = False
        self._decode_steps = self._step_runners()
        return self._decode_steps[greedy](*inputs)

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
                new_valid: torch.Tensor | None = None, last_only: bool = False,
                max_position: int | None = None) -> BatchTargetStep:
        """Append n entries to every row: ``input_ids``/``positions`` [B, n], ``tree_mask`` [B, n, n]
        bool (None = causal), ``new_valid`` [B, n] False for padding. ``last_only``: logits of the last
        column only (a left-padded prefill). ``max_position``: the largest of ``positions`` when the
        caller knows it on the host (None reads it back from the device: a sync)."""
        input_ids, positions = input_ids.to(self.device), positions.to(self.device, torch.long)
        self.check_position(int(positions.max()) if max_position is None else max_position)
        return self._append(input_ids, positions, tree_mask, new_valid, last_only)

    def _append(self, input_ids: torch.Tensor, positions: torch.Tensor, tree_mask: torch.Tensor | None,
                new_valid: torch.Tensor | None, last_only: bool) -> BatchTargetStep:
        """:meth:`forward` once its positions are known to lie in the context."""
        if new_valid is None:
            new_valid = torch.ones(input_ids.shape, dtype=torch.bool, device=self.device)
        n = input_ids.shape[1]
        if self._kv is not None:
            hidden, aux = self._static_forward(input_ids, positions, tree_mask, new_valid)
            logits = self.runner.lm_head(hidden[:, n - 1:n] if last_only else hidden).float()
        else:
            logits, aux = self._hf_forward(input_ids, positions, tree_mask, new_valid, last_only)
        self.slots.append(positions, new_valid)
        return BatchTargetStep(logits=logits, aux=aux)

    def check_position(self, position: int) -> None:
        """Refuse a position past the target's context (a host-side value: no device read)."""
        limit = self.config.max_position_embeddings
        if limit is not None and position >= limit:
            raise DraftlabError(f"position {position} is past the target's context of {limit} tokens")

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, steps: int, *, temperature: float = 0.0,
               gen: torch.Generator | None = None) -> torch.Tensor:
        """``steps`` plain decoding steps of every row: feed ``tokens`` [B, 1] at ``positions`` [B, 1],
        pick each row's next token (the first argmax at temperature 0, else a sample of
        softmax(logits / T) drawn with ``gen``), feed it at the next position, and so on. Returns the
        picked tokens [B, steps] (on the device: nothing is read back); the last column is not fed.
        Positions past the context are clamped to its last one: the caller stops such rows before
        (their later tokens are meaningless)."""
        tokens, positions = tokens.to(self.device), positions.to(self.device, torch.long)
        start = self.slots.length
        if self._kv is None:
            return self._hf_decode(tokens, positions, steps, temperature, gen)
        self._kv.check(start, steps)
        self._valid.zero_()
        self._valid[:, :start].copy_(self.slots.valid)
        self._key_positions[:, :start].copy_(self.slots.positions)
        greedy = temperature == 0
        picked = []
        for slot in range(start, start + steps):
            read = self._slot_ids[:self._kv.read_width(slot + 1)]
            out, positions = self._decode_step(greedy, tokens, positions, self._slot_ids[slot:slot + 1], read)
            tokens = out.clone() if greedy else pick_next(out, temperature, gen)
            picked.append(tokens)
        self.slots.append(self._key_positions[:, start:start + steps].clone(),
                          torch.ones(self.batch_size, steps, dtype=torch.bool, device=self.device))
        return torch.cat(picked, dim=1)

    def _hf_decode(self, tokens: torch.Tensor, positions: torch.Tensor, steps: int, temperature: float,
                   gen: torch.Generator | None) -> torch.Tensor:
        """:meth:`decode` as one :meth:`forward` per step (the HF path: no graphs to replay)."""
        limit = self.config.max_position_embeddings
        picked = []
        for _ in range(steps):
            logits = self._append(tokens, positions, None, None, True).logits[:, -1]
            tokens = pick_next(logits, temperature, gen)
            picked.append(tokens)
            positions = positions + 1 if limit is None else (positions + 1).clamp(max=limit - 1)
        return torch.cat(picked, dim=1)

    def _greedy_step(self, ids: torch.Tensor, positions: torch.Tensor, slot: torch.Tensor,
                     read: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_logits_step` with the argmax taken inside: the next tokens [B, 1] and positions."""
        logits, positions = self._logits_step(ids, positions, slot, read)
        return logits.argmax(-1, keepdim=True), positions

    def _logits_step(self, ids: torch.Tensor, positions: torch.Tensor, slot: torch.Tensor,
                     read: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step: ``ids``/``positions`` [B, 1] written to ``slot`` [1] of every row, reading
        ``read`` [W] slots (only its length matters: one graph per read bucket). The mask comes from
        the fixed ``_valid``/``_key_positions`` buffers, updated here. Returns float32 logits [B, V] and
        the next positions [B, 1] (clamped to the context)."""
        width = read.shape[0]
        self._valid.index_fill_(1, slot, True)
        self._key_positions.index_copy_(1, slot, positions)
        allowed = self._valid[:, None, :width]
        masks = {}
        for kind, window in self.runner._windows.items():
            near = allowed if window is None else \
                allowed & (positions[:, :, None] - self._key_positions[:, None, :width] < window)
            masks[kind] = self._additive(near)
        self._kv.begin(slot, width)
        with static_attention(self.runner.model):
            hidden, _ = self._walk(ids, positions, masks, self._kv, aux=False, compiled=self.compile)
        logits = self.runner.lm_head(hidden[:, -1]).float()
        limit = self.config.max_position_embeddings
        return logits, positions + 1 if limit is None else (positions + 1).clamp(max=limit - 1)

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
        return out.logits.float(), runner.features(captured, out.logits).to(self.device)

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


def pick_next(logits: torch.Tensor, temperature: float, gen: torch.Generator | None) -> torch.Tensor:
    """[B, V] -> [B, 1]: the argmax (the first maximum) at temperature 0, else a sample of
    softmax(logits / T) per row drawn with ``gen``."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    return torch.multinomial(torch.softmax(logits.float() / temperature, -1), 1, generator=gen)
