"""The EAGLE-3 drafter over B sequences at once, with a preallocated, padded KV cache.

The computation is :meth:`Eagle3Drafter.forward_masked` (batched, explicit positions and mask); this
adds the cache: a :class:`~draftlab.models.static_kv.BatchKV` of ``capacity`` slots per row for every
layer, allocated once and written in place, and the :class:`~draftlab.models.batch_slots.BatchSlots`
that say which slots are real. As in :mod:`draftlab.models.target_batch`, a forward of up to 64
tokens is widened to a token-count bucket and, on CUDA, replays as a CUDA graph.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from draftlab.errors import DraftlabError
from draftlab.models.batch_slots import BatchSlots, pad_block
from draftlab.models.drafter import DraftStep, Eagle3Drafter
from draftlab.models.graphs import BUCKETS, GraphSteps, bucket
from draftlab.models.kernels import attention_kernels
from draftlab.models.static_kv import BatchKV


class BatchDrafter:
    """B sequences of one drafter over a shared, padded KV cache of ``capacity`` slots per row."""

    def __init__(self, drafter: Eagle3Drafter, batch_size: int, capacity: int) -> None:
        if capacity < 1:
            raise DraftlabError(f"the batched KV cache needs a capacity >= 1 slot per row, got {capacity}")
        self.drafter = drafter
        self.batch_size = batch_size
        weight = drafter.lm_head.weight
        self.device = weight.device
        attn = drafter.midlayer.self_attn
        self._kv = BatchKV(drafter.config.num_layers, batch_size, attn.kv_heads, attn.head_dim, capacity,
                           dtype=weight.dtype, device=weight.device)
        self._run_bucket = GraphSteps(self._step) if self.device.type == "cuda" else self._step
        self.reset()

    def reset(self) -> None:
        """Empty every row's cache."""
        self.slots = BatchSlots(self.batch_size, self.device)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, *,
                tree_mask: torch.Tensor | None = None, new_valid: torch.Tensor | None = None) -> DraftStep:
        """Append n entries to every row: ``input_ids``/``positions`` [B, n], ``hidden`` [B, n, 3T or H],
        ``tree_mask`` [B, n, n] bool (None = causal), ``new_valid`` [B, n] False for padding.
        Returns logits [B, n, draft_vocab] and the pre-norm outputs [B, n, H]."""
        positions = positions.to(self.device, torch.long)
        if new_valid is None:
            new_valid = torch.ones(positions.shape, dtype=torch.bool, device=self.device)
        new_valid = new_valid.to(self.device)
        n, start = positions.shape[1], self.slots.length
        self._kv.check(start, n)
        width = bucket(n) or n
        positions_b, valid_b, tree_b, ids_b, hidden_b = pad_block(
            width, positions, new_valid, tree_mask, input_ids.to(self.device), hidden.to(self.device))
        mask = self._kv.pad(self.slots.allowed(positions_b, tree_b, valid_b))
        keys = F.pad(torch.cat([self.slots.positions, positions_b], dim=1), (0, mask.shape[-1] - start - width))
        slots = torch.arange(start, start + width, device=self.device)
        if width > BUCKETS[-1]:
            with attention_kernels():  # a shape that does not recur
                logits, out = self._step(ids_b, hidden_b, positions_b, slots, mask, keys)
        else:
            logits, out = self._run_bucket(ids_b, hidden_b, positions_b, slots, mask, keys)
        self.slots.append(positions, new_valid)
        return DraftStep(logits=logits[:, :n].clone(), hidden=out[:, :n].clone())

    def _step(self, ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
              mask: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward writing ``slots`` of every row under ``mask`` [B, n, read slots], whose keys sit at
        positions ``keys`` [B, read slots] (a sliding window's distances)."""
        self._kv.begin(slots, mask.shape[-1])
        logits, out, _ = self.drafter.forward_masked(ids, hidden, positions, mask, self._kv, key_positions=keys)
        return logits, out

    def keep(self, paths: list[list[int]]) -> None:
        """Of the entries the last forward appended, keep ``paths[b]`` in row b (none: drop them all)."""
        start = self.slots.block_start
        self._kv.keep(start, self.slots.keep(paths))
