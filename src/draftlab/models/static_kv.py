"""A preallocated KV cache whose tensors never move, so that steps over it can be captured as CUDA graphs.

Layout: one buffer for the keys and one for the values of every layer, ``[layers, 1, kv_heads, slots,
head_dim]``. Entry i of the sequence lives in slot i. A step over b new tokens writes slots
``start .. start + b - 1`` (``start`` = entries cached before it) and attends over all slots with a
mask that hides the slots at or past ``start`` other than its own tree's. Slots past the cache length
hold stale values that no mask lets through, so ``crop`` only moves the length and ``keep`` is one
gather and one in-place copy for all layers at once.

Attention reads the buffers without repeating the kv heads: the query heads that share a kv head are
folded into extra query rows (``gqa_attention``), which is the same computation as repeating the keys
and values for each of them, without copying the whole cache on every step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class StaticKV:
    """Fixed buffers for ``layers`` attention layers; HF decoder layers call :meth:`update`."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, slots: int, *, dtype: torch.dtype,
                 device: torch.device) -> None:
        shape = (layers, 1, kv_heads, slots, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.positions = torch.zeros(slots, dtype=torch.long, device=device)  # position of the entry in each slot
        self.slot_ids = torch.arange(slots, device=device)
        self.write_slots = self.slot_ids[:1]  # the slots the running step writes; set by begin()

    @property
    def num_slots(self) -> int:
        return self.positions.numel()

    def begin(self, slots: torch.Tensor, positions: torch.Tensor) -> None:
        """Start a step that writes ``slots`` (entries at ``positions``)."""
        self.write_slots = slots
        self.positions.index_copy_(0, slots, positions)

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the step's new keys/values ``[1, kv_heads, b, head_dim]``; return every slot of the layer."""
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        keys.index_copy_(2, self.write_slots, key.to(keys.dtype))
        values.index_copy_(2, self.write_slots, value.to(values.dtype))
        return keys, values

    def allowed(self, slots: torch.Tensor, positions: torch.Tensor, tree: torch.Tensor,
                window: int | None) -> torch.Tensor:
        """[b, num_slots] bool: slots before ``slots[0]`` (the cached prefix), the step's own slots where
        ``tree`` [b, b] allows, and, with a sliding window, only keys less than ``window`` positions back."""
        b = slots.numel()
        rel = self.slot_ids - slots[0]
        own = (rel >= 0) & (rel < b)
        mask = (rel < 0)[None, :] | (own[None, :] & tree[:, rel.clamp(0, b - 1)])
        if window is not None:
            mask = mask & (positions[:, None] - self.positions[None, :] < window)
        return mask

    def keep(self, start: int, indices: torch.Tensor) -> None:
        """Move the entries in slots ``start + indices`` to ``start, start + 1, ...`` (every layer)."""
        src = start + indices
        dst = start + self.slot_ids[: indices.numel()]
        for buf in (self.keys, self.values):
            buf.index_copy_(3, dst, buf.index_select(3, src))
        self.positions.index_copy_(0, dst, self.positions.index_select(0, src))


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool [b, S] -> additive [1, 1, b, S] (0 where allowed, the dtype's minimum elsewhere)."""
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask, zero, torch.finfo(dtype).min)[None, None]


def gqa_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                  scale: float | None) -> torch.Tensor:
    """SDPA of query [1, H, b, D] over key/value [1, Hkv, S, D] with a mask [1, 1, b, S] (bool, or
    additive in the query's dtype), each group of H / Hkv query heads folded into rows of its kv head.
    Returns [1, H, b, D]."""
    _, heads, b, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    q = query.reshape(1, kv_heads, groups * b, dim)
    m = mask.expand(1, groups, b, mask.shape[-1]).reshape(1, 1, groups * b, mask.shape[-1])
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=m, scale=scale)
    return out.reshape(1, heads, b, value.shape[-1])


def hf_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor, scaling: float | None = None, dropout: float = 0.0,
                 **kwargs: object) -> tuple[torch.Tensor, None]:
    """The attention function HF layers call in static mode (their ``[1, b, H, D]`` output layout)."""
    return gqa_attention(query, key, value, attention_mask, scaling).transpose(1, 2).contiguous(), None
