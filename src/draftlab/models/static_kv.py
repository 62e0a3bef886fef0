"""A preallocated KV cache whose tensors never move, so that steps over it can be captured as CUDA graphs.

Layout: one buffer for the keys and one for the values of every layer, ``[layers, 1, kv_heads, slots,
head_dim]``. Entry i of the sequence lives in slot i. A step over b new tokens writes slots
``start .. start + b - 1`` (``start`` = entries cached before it) and attends over the slots up to
its last one rounded up to ``READ_BUCKET`` (:meth:`StaticKV.reads`; the read width is part of the
step's shape, so a CUDA graph per width serves every step), with a mask that hides the slots at or past
``start`` other than its own tree's. At batch 1 attention streams its keys through a few thread
blocks, so a step that read the whole capacity paid for every empty slot (the 8B verify of a 3/1/4
cycle on an H200: 9.3 ms over 4,160 slots, 7.6 ms over the slots a 256-token run reads;
benchmarks/RESULTS.md, "Decode at the HBM floor", sessions 12 and 13). Slots past the cache length
hold stale values that no mask lets through, so ``crop`` only moves the length and ``keep`` is one
gather and one in-place copy for all layers at once.

:class:`BatchKV` is the same idea for B rows that advance in lockstep (the batched decoder): every
forward appends the same n slots to every row, which rows hold real entries is
:class:`~draftlab.models.batch_slots.BatchSlots`' job, and attention reads the used prefix of the
buffers (a view) rounded up to a multiple of ``read_bucket`` slots, the extra slots hidden by the
mask: the passes' shapes then recur, and a CUDA graph per (tokens bucket, read bucket) serves them.

Attention reads the buffers without repeating the kv heads: the query heads that share a kv head are
folded into extra query rows (``gqa_attention``), which is the same computation as repeating the keys
and values for each of them, without copying the whole cache on every step. ``cached_attention`` is a
step's write and read together: with ``DRAFTLAB_ATTENTION=split-kv``, one kernel does both
(:mod:`draftlab.models.split_kv`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F

from draftlab.errors import DraftlabError
from draftlab.models import split_kv
from draftlab.models.graphs import BUCKETS
from draftlab.models.kernels import split_kv_chosen, step_kernels

READ_BUCKET = 512  # slots a batch-1 step's reads round up to: each width is one CUDA graph per token bucket,
# so few of them (8 for 4,096 entries), and no step reads more than 511 slots it does not need


class _SlotBuffers(ABC):
    """Key and value buffers ``[layers, rows, kv_heads, slots, head_dim]`` that a step writes at
    ``write_slots`` and reads through :meth:`reads_of`: what both caches share."""

    keys: torch.Tensor
    values: torch.Tensor
    write_slots: torch.Tensor

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the step's new keys/values ``[rows, kv_heads, n, head_dim]``; return the layer's slots the
        step reads (:meth:`reads_of`)."""
        self.keys[layer_idx].index_copy_(2, self.write_slots, key.to(self.keys.dtype))
        self.values[layer_idx].index_copy_(2, self.write_slots, value.to(self.values.dtype))
        return self.reads_of(layer_idx)

    @abstractmethod
    def reads_of(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The slots of ``layer`` the running step reads: views of the buffers."""


class StaticKV(_SlotBuffers):
    """Fixed buffers for ``layers`` attention layers; HF decoder layers call :meth:`update`."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, slots: int, *, dtype: torch.dtype,
                 device: torch.device) -> None:
        shape = (layers, 1, kv_heads, slots, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.positions = torch.zeros(slots, dtype=torch.long, device=device)  # position of the entry in each slot
        self.slot_ids = torch.arange(slots, device=device)
        self.write_slots = self.slot_ids[:1]  # the slots the running step writes; set by begin()
        self.read = self.slot_ids  # the slots it reads; set by begin()

    @property
    def num_slots(self) -> int:
        return self.positions.numel()

    def reads(self, end: int) -> torch.Tensor:
        """The slot ids a step whose written slots end before ``end`` reads: ``end`` rounded up to
        ``READ_BUCKET`` (at most every slot). Pass it to the step: its length is the read width."""
        return self.slot_ids[:min(self.num_slots, -(-end // READ_BUCKET) * READ_BUCKET)]

    def begin(self, slots: torch.Tensor, positions: torch.Tensor, read: torch.Tensor) -> None:
        """Start a step that writes ``slots`` (entries at ``positions``) and reads ``read`` (from
        :meth:`reads`)."""
        self.write_slots, self.read = slots, read
        self.positions.index_copy_(0, slots, positions)

    def reads_of(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The slots of ``layer`` the running step reads (the width :meth:`reads` gave): views of the buffers."""
        width = self.read.numel()
        return self.keys[layer, :, :, :width], self.values[layer, :, :, :width]

    def allowed(self, slots: torch.Tensor, positions: torch.Tensor, tree: torch.Tensor,
                window: int | None) -> torch.Tensor:
        """[b, read width] bool: slots before ``slots[0]`` (the cached prefix), the step's own slots where
        ``tree`` [b, b] allows, and, with a sliding window, only keys less than ``window`` positions back."""
        b = slots.numel()
        rel = self.read - slots[0]
        own = (rel >= 0) & (rel < b)
        mask = (rel < 0)[None, :] | (own[None, :] & tree[:, rel.clamp(0, b - 1)])
        if window is not None:
            mask = mask & (positions[:, None] - self.positions[None, :self.read.numel()] < window)
        return mask

    def keep(self, start: int | torch.Tensor, indices: torch.Tensor) -> None:
        """Move the entries in slots ``start + indices`` to ``start, start + 1, ...`` (every layer); ``start``
        may be a count held on the device ([1])."""
        src = start + indices
        dst = start + self.slot_ids[: indices.numel()]
        for buf in (self.keys, self.values):
            buf.index_copy_(3, dst, buf.index_select(3, src))
        self.positions.index_copy_(0, dst, self.positions.index_select(0, src))


class BatchKV(_SlotBuffers):
    """Fixed buffers ``[layers, B, kv_heads, slots, head_dim]`` for B rows that append the same number
    of slots per forward; HF decoder layers (and the drafter's attention) call :meth:`update`.

    ``capacity`` slots per row hold real entries; past them lies room for one padded block (a forward
    widened to a token-count bucket writes its padding there). A forward writes the slot tensor given
    to :meth:`begin` (so a CUDA graph of it replays at any offset) and reads its used slots rounded up
    to ``read_bucket``: the mask's width (:meth:`pad`)."""

    READ_BUCKET = 128  # slots the reads round up to, by default

    def __init__(self, layers: int, batch_size: int, kv_heads: int, head_dim: int, capacity: int, *,
                 dtype: torch.dtype, device: torch.device, read_bucket: int = READ_BUCKET) -> None:
        shape = (layers, batch_size, kv_heads, capacity + BUCKETS[-1], head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.capacity = capacity
        self.read_bucket = read_bucket
        self.write_slots = torch.zeros(0, dtype=torch.long, device=device)  # set by begin()
        self.read_end = 0

    @property
    def num_slots(self) -> int:
        return self.keys.shape[3]

    def check(self, start: int, n: int) -> None:
        """Refuse a forward whose n real entries after ``start`` would not fit."""
        if start + n > self.capacity:
            raise DraftlabError(f"the batched KV cache holds {self.capacity} slots per row and this forward "
                                f"needs {start + n}; size it with a larger capacity")

    def pad(self, allowed: torch.Tensor) -> torch.Tensor:
        """Widen a bool mask over a forward's used slots [..., end] to the slots it reads (``end``
        rounded up to the bucket), hiding the extra ones (they hold zeros or stale entries)."""
        end = allowed.shape[-1]
        return F.pad(allowed, (0, self.read_width(end) - end), value=False)

    def read_width(self, end: int) -> int:
        """Slots a forward whose used slots end at ``end`` reads: ``end`` rounded up to the bucket."""
        return min(self.num_slots, -(-end // self.read_bucket) * self.read_bucket)

    def begin(self, slots: torch.Tensor, read_end: int) -> None:
        """Start a forward that writes ``slots`` [n] of every row and reads slots ``0 .. read_end - 1``."""
        self.write_slots, self.read_end = slots, read_end

    def reads_of(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The slots of ``layer`` up to ``read_end``: views of the buffers."""
        return self.keys[layer, :, :, :self.read_end], self.values[layer, :, :, :self.read_end]

    def keep(self, start: int, index: torch.Tensor | int) -> None:
        """Apply :meth:`BatchSlots.keep`'s result, whose block of appended slots began at ``start``:
        each row's kept entries ``index[:, start:]`` move to ``start, start + 1, ...`` (every layer).
        A crop (an int) moves nothing: slots past the used length are never read before rewritten."""
        if isinstance(index, int):
            return
        src = index[:, start:].to(self.keys.device)
        layers, batch, heads, _, dim = self.keys.shape
        gather = src[None, :, None, :, None].expand(layers, batch, heads, src.shape[1], dim)
        for buf in (self.keys, self.values):
            buf[:, :, :, start:start + src.shape[1]].copy_(buf.gather(3, gather))


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool [b, S] -> additive [1, 1, b, S] (0 where allowed, the dtype's minimum elsewhere)."""
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask, zero, torch.finfo(dtype).min)[None, None]


def _fold(query: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """Query [B, H, b, D] -> [B, Hkv, H / Hkv * b, D]: each group of query heads as rows of its kv head."""
    batch, heads, b, dim = query.shape
    return query.reshape(batch, kv_heads, heads // kv_heads * b, dim)


def gqa_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                  scale: float | None) -> torch.Tensor:
    """Attention of query [B, H, b, D] over key/value [B, Hkv, S, D] with a mask [B or 1, 1, b, S] (bool,
    or additive in the query's dtype), each group of H / Hkv query heads folded into rows of its kv head.
    SDPA, or with ``split-kv`` chosen the split-KV kernels where they apply. Returns [B, H, b, D]."""
    batch, heads, b, dim = query.shape
    q = _fold(query, key.shape[1])
    if split_kv_chosen() and split_kv.applies(q, key, value, mask):
        out = split_kv.attention(q, key, value, mask, b, dim ** -0.5 if scale is None else scale)
        if out is not None:  # None: the kernels cannot build on this GPU
            return out.reshape(batch, heads, b, value.shape[-1])
    groups = heads // key.shape[1]
    m = mask.expand(batch, groups, b, mask.shape[-1]).reshape(batch, 1, groups * b, mask.shape[-1])
    with step_kernels():
        out = F.scaled_dot_product_attention(q, key, value, attn_mask=m, scale=scale)
    return out.reshape(batch, heads, b, value.shape[-1])


def cached_attention(cache: StaticKV | BatchKV, layer: int, query: torch.Tensor, key: torch.Tensor,
                     value: torch.Tensor, mask: torch.Tensor, scale: float | None) -> torch.Tensor:
    """A step's attention over a preallocated cache: its new keys/values [B, Hkv, b, D] written into
    layer ``layer`` (at the cache's write slots), then :func:`gqa_attention` over the slots it reads.
    Where the split-KV kernels apply, they do the write themselves (two kernels fewer per layer)."""
    if split_kv_chosen():
        keys, values = cache.reads_of(layer)
        q = _fold(query, keys.shape[1])
        if split_kv.applies(q, keys, values, mask):
            batch, heads, b, dim = query.shape
            out = split_kv.attention(q, keys, values, mask, b, dim ** -0.5 if scale is None else scale,
                                     append=(key, value, cache.write_slots))
            if out is not None:
                return out.reshape(batch, heads, b, values.shape[-1])
    return gqa_attention(query, *cache.update(key, value, layer), mask, scale)


def hf_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor, scaling: float | None = None, dropout: float = 0.0,
                 **kwargs: object) -> tuple[torch.Tensor, None]:
    """The attention function HF layers call over a static cache (their ``[B, b, H, D]`` output layout)."""
    return gqa_attention(query, key, value, attention_mask, scaling).transpose(1, 2).contiguous(), None
