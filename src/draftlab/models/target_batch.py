"""The target over B sequences at once: one forward verifies every row's draft tree.

Rows share one Hugging Face ``DynamicCache`` of [B, heads, slots, head_dim]; which slots hold real
entries is :class:`~draftlab.models.batch_slots.BatchSlots`' job, and the attention mask it builds is
passed to transformers as a ready 4D additive mask with explicit ``position_ids`` (as
:class:`~draftlab.models.target.TargetRunner` does for one row). Aux features come from the runner's
forward hooks, so the runner must use its dynamic cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from draftlab.errors import DraftlabError
from draftlab.models.batch_slots import BatchSlots, gather_slots
from draftlab.models.target import TargetRunner


@dataclass
class BatchTargetStep:
    logits: torch.Tensor  # [B, n, V] float32 (n = 1 with last_only)
    aux: torch.Tensor  # [B, n, len(aux_layers) * hidden], model dtype


class BatchTarget:
    """B sequences of one target over a shared, padded KV cache."""

    def __init__(self, runner: TargetRunner, batch_size: int) -> None:
        if runner._static is not None:
            raise DraftlabError("batched runs need the target's dynamic cache; load it with cache='dynamic'")
        if batch_size < 1:
            raise DraftlabError(f"batch size must be >= 1, got {batch_size}")
        self.runner = runner
        self.batch_size = batch_size
        self.config = runner.config
        self.device = runner.device
        self.reset()

    def reset(self) -> None:
        """Empty every row's cache."""
        self._cache = DynamicCache()
        self.slots = BatchSlots(self.batch_size, self.device)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, *, tree_mask: torch.Tensor | None = None,
                new_valid: torch.Tensor | None = None, last_only: bool = False) -> BatchTargetStep:
        """Append n entries to every row: ``input_ids``/``positions`` [B, n], ``tree_mask`` [B, n, n]
        bool (None = causal), ``new_valid`` [B, n] False for padding. ``last_only``: logits of the last
        column only (a left-padded prefill)."""
        runner = self.runner
        input_ids, positions = input_ids.to(self.device), positions.to(self.device, torch.long)
        if new_valid is None:
            new_valid = torch.ones(input_ids.shape, dtype=torch.bool, device=self.device)
        limit = self.config.max_position_embeddings
        if limit is not None and int(positions.max()) >= limit:
            raise DraftlabError(f"position {int(positions.max())} is past the target's context of {limit} tokens")
        masks = {kind: self._additive(self.slots.allowed(positions, tree_mask, new_valid, window))
                 for kind, window in runner._windows.items()}
        mask = next(iter(masks.values())) if len(masks) == 1 else masks
        runner._captured.clear()
        out = runner.model(input_ids=input_ids, position_ids=positions, attention_mask=mask, use_cache=True,
                           logits_to_keep=1 if last_only else 0, **{runner.cache_arg: self._cache})
        self.slots.append(positions, new_valid)
        aux = torch.cat([runner._captured[k].to(self.device) for k in runner.aux_layers], dim=-1)
        runner._captured.clear()
        return BatchTargetStep(logits=out.logits.float(), aux=aux)

    def keep(self, paths: list[list[int]]) -> None:
        """Of the entries the last forward appended, keep ``paths[b]`` in row b (the rest become padding)."""
        index = self.slots.keep(paths)
        for layer in self._cache.layers:
            if layer.is_initialized and layer.keys.numel():
                idx = index if isinstance(index, int) else index.to(layer.keys.device)
                layer.keys, layer.values = gather_slots(layer.keys, idx), gather_slots(layer.values, idx)

    def _additive(self, allowed: torch.Tensor) -> torch.Tensor:
        """[B, n, S] bool -> [B, 1, n, S] additive mask in the model's dtype."""
        out = torch.zeros(allowed.shape, dtype=self.runner.dtype, device=allowed.device)
        out.masked_fill_(~allowed, torch.finfo(self.runner.dtype).min)
        return out[:, None]
