"""Bookkeeping of a KV cache shared by B sequences that advance by different amounts.

Every forward appends the same number of slots to every row; rows then keep different subsets (the
accepted path of their own draft tree), so a row's kept entries are packed to the front of the
appended block and the rest of the block becomes padding: slots that no later token attends to.
Prompts of different lengths are left-padded the same way. A slot therefore carries two facts:
``valid`` (a real entry) and ``positions`` (its token position, for sliding windows). The caches that
use this (:mod:`draftlab.models.target_batch`, :mod:`draftlab.models.drafter_batch`) only move their
key/value entries by the index :meth:`BatchSlots.keep` returns: a preallocated
:class:`~draftlab.models.static_kv.BatchKV` packs the appended block in place, a growing cache
gathers whole tensors (:func:`gather_slots`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from draftlab.errors import DraftlabError


class BatchSlots:
    """Which cache slots of each row hold real entries, and at which positions."""

    def __init__(self, batch_size: int, device: torch.device) -> None:
        self.batch_size = batch_size
        self.device = device
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=device)
        self.positions = torch.zeros(batch_size, 0, dtype=torch.long, device=device)
        self.last_new = 0

    @property
    def length(self) -> int:
        """Slots per row, padding included."""
        return self.valid.shape[1]

    @property
    def block_start(self) -> int:
        """The first slot of the block the last forward appended (what :meth:`keep` packs)."""
        return self.length - self.last_new

    def counts(self) -> torch.Tensor:
        """[B] real entries per row: the position of each row's next token."""
        return self.valid.sum(dim=1)

    def allowed(self, positions: torch.Tensor, tree_mask: torch.Tensor | None, new_valid: torch.Tensor,
                window: int | None = None) -> torch.Tensor:
        """[B, n, length + n] bool: each new entry sees the row's real cached entries and the new entries
        ``tree_mask`` [B, n, n] allows (causal when None) that are real. Every entry also sees itself,
        so a padding entry never has an empty softmax."""
        b, n = positions.shape
        eye = torch.eye(n, dtype=torch.bool, device=self.device)
        if tree_mask is None:
            tree = torch.ones(n, n, dtype=torch.bool, device=self.device).tril()
        else:
            tree = tree_mask.to(self.device, torch.bool)
        new = (tree & new_valid[:, None, :]) | eye
        allowed = torch.cat([self.valid[:, None, :].expand(b, n, self.length), new.expand(b, n, n)], dim=2)
        if window is not None:
            keys = torch.cat([self.positions, positions], dim=1)
            allowed &= (positions[:, :, None] - keys[:, None, :]) < window
        return allowed

    def append(self, positions: torch.Tensor, new_valid: torch.Tensor) -> None:
        """Record the n slots a forward appended to every row."""
        self.valid = torch.cat([self.valid, new_valid.to(self.device, torch.bool)], dim=1)
        self.positions = torch.cat([self.positions, positions.to(self.device, torch.long)], dim=1)
        self.last_new = positions.shape[1]

    def keep(self, paths: list[list[int]]) -> torch.Tensor | int:
        """Of the slots the last forward appended, keep ``paths[b]`` (in that order) in row b.

        Returns the [B, kept slots] gather index for the caches' key/value tensors, or, when no row
        keeps anything, the prefix length to crop to (cheaper than a gather)."""
        if len(paths) != self.batch_size:
            raise DraftlabError(f"keep() got {len(paths)} paths for a batch of {self.batch_size}")
        start = self.block_start
        if any(i < 0 or i >= self.last_new for p in paths for i in p):
            raise DraftlabError(f"keep() indices must lie in 0..{self.last_new - 1} (the last forward's entries)")
        width = max(len(p) for p in paths)
        self.last_new = width
        if width == 0:
            self.valid, self.positions = self.valid[:, :start], self.positions[:, :start]
            return start
        picked = torch.tensor([p + [0] * (width - len(p)) for p in paths], dtype=torch.long, device=self.device)
        real = torch.tensor([[i < len(p) for i in range(width)] for p in paths], device=self.device)
        prefix = torch.arange(start, device=self.device).expand(self.batch_size, start)
        index = torch.cat([prefix, start + picked], dim=1)
        self.valid = self.valid.gather(1, index) & torch.cat([self.valid[:, :start].new_ones(prefix.shape), real], 1)
        self.positions = self.positions.gather(1, index)
        return index


def gather_slots(tensor: torch.Tensor, index: torch.Tensor | int) -> torch.Tensor:
    """Apply :meth:`BatchSlots.keep`'s result to a [B, heads, slots, head_dim] key or value tensor."""
    if isinstance(index, int):
        return tensor[:, :, :index]
    b, h, _, d = tensor.shape
    return tensor.gather(2, index[:, None, :, None].expand(b, h, index.shape[1], d))


def pad_block(width: int, positions: torch.Tensor, new_valid: torch.Tensor, tree_mask: torch.Tensor | None,
              *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Widen a forward's block of n entries to ``width`` (a token-count bucket) with padding entries:
    invalid (no real entry sees them), at the block's last positions, outside the tree, with zeros
    as their ``inputs`` ([B, n, ...] token ids or hidden states). Returns positions, new_valid,
    tree_mask (None stays None: causal) and the inputs, in that order."""
    pad = width - positions.shape[1]
    if pad == 0:
        return positions, new_valid, tree_mask, *inputs
    positions = torch.cat([positions, positions[:, -1:].expand(-1, pad)], dim=1)
    new_valid = F.pad(new_valid, (0, pad), value=False)
    if tree_mask is not None:
        tree_mask = F.pad(tree_mask, (0, pad, 0, pad), value=False)
    widened = [F.pad(x, (0, 0) * (x.dim() - 2) + (0, pad)) for x in inputs]
    return positions, new_valid, tree_mask, *widened


def left_pad(prompts: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded ids [B, width], each row's positions (0 at its first token) and which slots are real:
    a batched prefill's inputs, after which every row's next token is the last column's."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], dtype=torch.long, device=device)
    pads = torch.tensor([width - len(p) for p in prompts], device=device)[:, None]
    columns = torch.arange(width, device=device)[None]
    return ids, (columns - pads).clamp(min=0), columns >= pads
