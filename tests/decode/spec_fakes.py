"""Tiny synthetic target and drafter that implement the runtime interface exactly.

The target is a second-order table model: the logits after token x_t are W[x_{t-1}, x_t] (a fixed
random table), so its greedy output and its exact sampling distribution are known in closed form.
Its aux feature at position t is one-hot(x_t) padded to 3*V, so a drafter fed the right feature
(the one of the position before the token it embeds, as EAGLE-3 aligns them) can predict well. The drafter
predicts from (previous token, token) with the target's table plus noise, over a draft vocabulary
that is a subset of the target's (d2t offsets), and returns one-hot(token) as its hidden so the next
draft step knows the previous token. Both keep a KV cache of (token, position) entries with the
interface's forward/keep semantics and check every position they are given.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import torch

BOS = -1  # "no previous token" row of the tables


@dataclass
class Step:
    logits: torch.Tensor
    aux: torch.Tensor | None = None
    hidden: torch.Tensor | None = None


class _Cached:
    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []  # (token, position)
        self._last_start = 0
        self.forwards = 0

    def reset(self) -> None:
        self.entries, self._last_start = [], 0

    @property
    def cache_len(self) -> int:
        return len(self.entries)

    def _prev_tokens(self, ids: list[int], mask: torch.Tensor | None, positions: torch.Tensor | None) -> list[int]:
        """The token each new token follows (nearest visible earlier one), checking positions."""
        n = len(ids)
        if mask is None:
            mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
        if positions is None:
            positions = self.cache_len + torch.arange(n)
        prev_tok, prev_pos = (self.entries[-1] if self.entries else (BOS, -1))
        out = []
        for i in range(n):
            visible = [j for j in range(i) if mask[i, j]]
            assert bool(mask[i, i]), "a token must see itself"
            tok, pos = (ids[visible[-1]], int(positions[visible[-1]])) if visible else (prev_tok, prev_pos)
            assert int(positions[i]) == pos + 1, f"position {int(positions[i])} after {pos}"
            out.append(tok)
        self._last_start = len(self.entries)
        self.entries += [(t, int(p)) for t, p in zip(ids, positions)]
        self.forwards += 1
        return out

    def keep(self, indices: torch.Tensor) -> None:
        new = self.entries[self._last_start:]
        self.entries = self.entries[: self._last_start] + [new[int(i)] for i in indices]


class FakeTarget(_Cached):
    def __init__(self, table: torch.Tensor, *, eos: set[int] | None = None, context: int | None = None) -> None:
        super().__init__()
        self.table = table  # [V + 1, V, V]: row BOS (= last) for "no previous token"
        self.vocab = table.shape[-1]
        self.config = SimpleNamespace(vocab_size=self.vocab, max_position_embeddings=context)
        self.eos_token_ids = eos or set()
        self.device = torch.device("cpu")

    def forward(self, input_ids, *, tree_mask=None, positions=None, max_position=None) -> Step:
        ids = input_ids.tolist()
        prev = self._prev_tokens(ids, tree_mask, positions)
        assert max_position is None or max(p for _, p in self.entries[self._last_start:]) <= max_position, \
            "max_position is not a bound on the positions"
        context = self.config.max_position_embeddings
        assert context is None or max(p for _, p in self.entries[self._last_start:]) < context, "past the context"
        logits = torch.stack([self.table[p, t] for p, t in zip(prev, ids)])
        aux = torch.zeros(len(ids), 3 * self.vocab)
        aux[torch.arange(len(ids)), input_ids] = 1.0
        return Step(logits=logits, aux=aux)


class FakeDrafter(_Cached):
    def __init__(self, table: torch.Tensor, noise: torch.Tensor, draft_ids: list[int]) -> None:
        super().__init__()
        self.table = table + noise
        self.vocab = table.shape[-1]
        self.draft_ids = torch.tensor(draft_ids)
        self.d2t = self.draft_ids - torch.arange(len(draft_ids))
        self.config = SimpleNamespace(draft_vocab_size=len(draft_ids))
        self.graphs = False

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def forward(self, input_ids, hidden, *, positions=None, tree_mask=None) -> Step:
        ids = input_ids.tolist()
        self._prev_tokens(ids, tree_mask, positions)
        assert hidden.shape == (len(ids), 3 * self.vocab) or hidden.shape == (len(ids), self.vocab)
        prev = [int(h[: self.vocab].argmax()) if h[: self.vocab].any() else BOS for h in hidden]
        logits = torch.stack([self.table[p, t][self.draft_ids] for p, t in zip(prev, ids)])
        out_hidden = torch.nn.functional.one_hot(input_ids, self.vocab).float()
        return Step(logits=logits, hidden=out_hidden)


def make_pair(vocab: int = 8, *, seed: int = 0, sharpness: float = 3.0, noise: float = 1.0,
              draft_ids: list[int] | None = None, eos: set[int] | None = None, context: int | None = None):
    g = torch.Generator().manual_seed(seed)
    table = sharpness * torch.randn(vocab + 1, vocab, vocab, generator=g)
    target = FakeTarget(table, eos=eos, context=context)
    drafter = FakeDrafter(table, noise * torch.randn(table.shape, generator=g), draft_ids or list(range(vocab)))
    return target, drafter


def greedy_reference(table: torch.Tensor, prompt: list[int], n: int) -> list[int]:
    """The target's own greedy continuation, straight from its table."""
    seq = list(prompt)
    for _ in range(n):
        prev = seq[-2] if len(seq) > 1 else BOS
        seq.append(int(table[prev, seq[-1]].argmax()))
    return seq[len(prompt):]
