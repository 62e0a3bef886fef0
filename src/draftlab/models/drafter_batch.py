"""The EAGLE-3 drafter over B sequences at once, with a padded KV cache per layer.

The computation is :meth:`Eagle3Drafter.forward_masked` (batched, explicit positions and mask); this
adds the cache: [B, kv_heads, slots, head_dim] keys and values per layer and the
:class:`~draftlab.models.batch_slots.BatchSlots` that say which slots are real.
"""

from __future__ import annotations

import torch

from draftlab.models.batch_slots import BatchSlots, gather_slots
from draftlab.models.drafter import KV, DraftStep, Eagle3Drafter


class BatchDrafter:
    """B sequences of one drafter over a shared, padded KV cache."""

    def __init__(self, drafter: Eagle3Drafter, batch_size: int) -> None:
        self.drafter = drafter
        self.batch_size = batch_size
        self.device = drafter.lm_head.weight.device
        self.reset()

    def reset(self) -> None:
        self._kv: list[KV] | None = None
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
        mask = self.slots.allowed(positions, tree_mask, new_valid.to(self.device))
        logits, out, kv = self.drafter.forward_masked(input_ids, hidden, positions, mask, self._kv)
        self._kv = kv if self._kv is None else [
            (torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)) for (pk, pv), (k, v) in zip(self._kv, kv)]
        self.slots.append(positions, new_valid)
        return DraftStep(logits=logits, hidden=out)

    def keep(self, paths: list[list[int]]) -> None:
        """Of the entries the last forward appended, keep ``paths[b]`` in row b (none: drop them all)."""
        index = self.slots.keep(paths)
        if self._kv is not None:
            self._kv = [(gather_slots(k, index), gather_slots(v, index)) for k, v in self._kv]
