"""The drafter for every possible cycle start at once: how many drafted tokens each cycle would accept.

Alignment (the reference decoder's, :mod:`draftlab.decode.decoder`): drafter entry s holds the target
feature of position s and the token at s + 1, at RoPE position s. A cycle whose root (last committed
token) sits at position r = s + 1 starts from entry s; its cache is entries 0..s.

- step 1, one causal pass over all entries: this is also the decoder's draft-extend cache;
- later steps, one pass each over the k frontier nodes of every cycle (batch = B x k, slot-major):
  a node at depth d of the cycle from entry s sits at position s + d and attends entries 0..s plus
  its own ancestors (EAGLE-3's training-time-test pattern: causal block, then one diagonal block per
  earlier depth, its ancestors' keys gathered into the node's row);
- candidates, scores, frontier and kept nodes come from :func:`draftlab.decode.tree.draft_top_k`,
  :func:`~draftlab.decode.tree.select_top_k` and :func:`~draftlab.decode.tree.kept_pool_mask`, the
  decoder's own rules, over all cycles at once.

Under greedy verification a cycle accepts the longest path of kept nodes that spells the tokens
after its root, so :func:`accepted_drafts` tracks only that path through the pool; every other node
matters only through the scores that decide what is kept. Sampled verification can accept any kept
node, so :func:`drafted_trees` returns the whole pool.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from draftlab.decode.tree import Frontier, PoolChunk, draft_top_k, kept_pool_mask, select_top_k
from draftlab.engines.sglang_flags import SpecFlags
from draftlab.models.attention import KV
from draftlab.models.drafter import Eagle3Drafter


@torch.no_grad()
def accepted_drafts(drafter: Eagle3Drafter, tokens: torch.Tensor, features: torch.Tensor, truth: torch.Tensor,
                    flags: SpecFlags) -> torch.Tensor:
    """Drafted tokens accepted by a greedy cycle rooted at each position 1..L-1.

    ``tokens`` [B, L] right-padded sequences, ``features`` [B, L, 3T] their aux features, ``truth``
    [B, >= L + steps] the token each position must hold for a draft there to be accepted (-1 where
    unknown, so nothing is accepted past the known text). Returns [B, L - 1] long: element s is the
    count for the cycle whose root is at position s + 1.
    """
    k, n = flags.topk, tokens.shape[1] - 1
    truth = truth.to(drafter.lm_head.weight.device)

    def want(depth: int) -> torch.Tensor:  # [B, n, 1]: the token a depth-`depth` draft must match
        return truth[:, 1 + depth:1 + depth + n, None]

    chunks, true_pool, true_slot = [], [], None  # true_*: the on-path node at each depth, -1 if absent
    for step, (frontier, chunk, ids, previous) in enumerate(_draft_steps(drafter, tokens, features, flags)):
        chunks.append(chunk)
        if step == 0:
            true_slot = _slot_of(frontier.tokens == want(1))
            true_pool.append(true_slot.clone())
            continue
        b = ids.shape[0]
        on_path = true_slot >= 0
        row = ids.gather(2, true_slot.clamp(min=0)[..., None, None].expand(b, n, 1, k))[:, :, 0]
        child = _slot_of(row == want(step + 1))
        flat = true_slot.clamp(min=0) * k + child.clamp(min=0)
        found = on_path & (child >= 0)
        true_pool.append(torch.where(found, previous.pool_index.new_tensor(k + (step - 1) * k * k) + flat, -1))
        true_slot = torch.where(found, _slot_of(frontier.pool_index - (k + (step - 1) * k * k) == flat[..., None]),
                                -1)

    kept = kept_pool_mask(chunks, flags.num_draft_tokens)  # [B, n, pool]
    accepted = torch.zeros_like(true_pool[0])
    alive = torch.ones_like(true_pool[0], dtype=torch.bool)
    for pool_index in true_pool:
        alive &= (pool_index >= 0) & kept.gather(-1, pool_index.clamp(min=0)[..., None])[..., 0]
        accepted += alive
    return accepted


@torch.no_grad()
def drafted_trees(drafter: Eagle3Drafter, tokens: torch.Tensor, features: torch.Tensor,
                  flags: SpecFlags) -> list[PoolChunk]:
    """The whole draft pool of the cycle rooted at each position 1..L-1, one chunk per step (depth =
    step + 1): entries [B, L - 1, m] with their target ids, scores and parents' pool indices. The
    tree a cycle verifies is the pool's :func:`~draftlab.decode.tree.kept_pool_mask`."""
    return [chunk for _, chunk, _, _ in _draft_steps(drafter, tokens, features, flags)]


def _draft_steps(drafter: Eagle3Drafter, tokens: torch.Tensor, features: torch.Tensor, flags: SpecFlags
                 ) -> Iterator[tuple[Frontier, PoolChunk, torch.Tensor | None, Frontier | None]]:
    """Draft every cycle at once, step by step: yield the new frontier, the step's pool chunk and, after
    step 0, the children's target ids [B, n, k, k] and the frontier they were drafted from."""
    b, length = tokens.shape
    n = length - 1
    k, steps = flags.topk, flags.steps
    device = drafter.lm_head.weight.device
    tokens = tokens.to(device)
    positions = torch.arange(n, device=device)
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    logits, hidden, prefix = drafter.forward_masked(
        tokens[:, 1:], features[:, :n], positions.expand(b, n), causal[None])

    top_p, top_d = draft_top_k(logits, k)
    frontier, chunk = select_top_k(0, top_p, drafter.to_target_ids(top_d), None, k)
    yield frontier, chunk, None, None
    ancestors: list[list[KV]] = []  # per depth, per layer: keys/values aligned to the frontier slots
    parent_hidden = hidden[:, :, None].expand(b, n, k, hidden.shape[-1])
    blocks = [causal]
    for step in range(1, steps):
        blocks.append(torch.eye(n, dtype=torch.bool, device=device))
        past = [(torch.cat([pk.repeat_interleave(k, 0)] + [a[i][0] for a in ancestors], dim=2),
                 torch.cat([pv.repeat_interleave(k, 0)] + [a[i][1] for a in ancestors], dim=2))
                for i, (pk, pv) in enumerate(prefix)]
        out_logits, out_hidden, new_kv = drafter.forward_masked(
            _slot_major(frontier.tokens), _slot_major(parent_hidden), (positions + step).expand(b * k, n),
            torch.cat(blocks, dim=1)[None], past,
            key_positions=torch.cat([positions + d for d in range(step + 1)])[None])  # prefix, ancestors, new
        top_p, top_d = draft_top_k(_position_major(out_logits, b, k), k)
        ids = drafter.to_target_ids(top_d)  # [B, n, k, k]: children of each frontier slot
        previous = frontier
        frontier, chunk = select_top_k(step, top_p, ids, previous, k)
        yield frontier, chunk, ids, previous
        ancestors = [[_reorder(kv, frontier.rows) for kv in depth] for depth in ancestors]
        ancestors.append([_reorder(kv, frontier.rows) for kv in new_kv])
        parent_hidden = _position_major(out_hidden, b, k).gather(
            2, frontier.rows[..., None].expand(b, n, k, out_hidden.shape[-1]))


def _slot_of(match: torch.Tensor) -> torch.Tensor:
    """Index of the first True along the last dim, -1 where there is none."""
    return torch.where(match.any(-1), match.int().argmax(-1), -1)


def _slot_major(x: torch.Tensor) -> torch.Tensor:
    """[B, n, k, ...] -> [B * k, n, ...]: one drafter batch row per frontier slot."""
    return x.transpose(1, 2).reshape(x.shape[0] * x.shape[2], x.shape[1], *x.shape[3:])


def _position_major(x: torch.Tensor, b: int, k: int) -> torch.Tensor:
    """[B * k, n, ...] -> [B, n, k, ...]."""
    return x.reshape(b, k, *x.shape[1:]).transpose(1, 2)


def _reorder(kv: KV, rows: torch.Tensor) -> KV:
    """Keys/values [B * k, heads, n, d] of the previous frontier, re-aligned to the new frontier's
    slots: slot a of cycle s takes the entry of its parent, slot ``rows[b, s, a]``."""
    b, n, k = rows.shape
    index = rows.transpose(1, 2)[:, :, None, :, None]  # [B, k, 1, n, 1]

    def one(t: torch.Tensor) -> torch.Tensor:
        t = t.reshape(b, k, *t.shape[1:])
        return t.gather(1, index.expand(b, k, t.shape[2], n, t.shape[4])).reshape(b * k, *t.shape[2:])

    return one(kv[0]), one(kv[1])
