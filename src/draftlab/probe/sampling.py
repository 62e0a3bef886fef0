"""Temperature > 0: the expected acceptance of the engines' draft trees, along the text (an estimate).

SGLang and vLLM draft the drafter's top-k at every temperature and verify by sampling: at each node
the token the target samples from its distribution p is accepted if a kept child carries it
(SGLang's ``tree_speculative_sampling_target_only``, vLLM's rejection sampler without draft
probabilities; per-sibling rejection gives every child x exactly probability p(x)). A kept node v is
therefore reached with probability prod_{u on the path to v} p_u(token of u), p_u being the target's
distribution after u's parent, and a cycle's expected accept length is 1 + the sum of those
probabilities over the kept nodes. Along a text (the target's sampled continuation), the cycle
rooted at each position takes p at depth d from the text's own position d - 1 after the root. It is
an estimate: exact at depth 1, while deeper nodes' real prefixes are their ancestors, not the text.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from draftlab.decode.tree import PoolChunk, kept_pool_mask


@torch.no_grad()
def reach_by_depth(pool: list[PoolChunk], num_draft_tokens: int,
                   target_logits_at: Callable[[torch.Tensor], torch.Tensor], temperature: float,
                   chunk: int = 256) -> torch.Tensor:
    """reach [B, n, steps]: the probability that the cycle rooted at each position accepts a draft at
    depth d (d = 1..steps). ``pool`` is :func:`~draftlab.probe.drafts.drafted_trees`' output (entries
    [B, n, m] per depth); ``target_logits_at(positions)`` returns the target's logits [B, len(positions), V]
    at text positions ``positions``: s + d for depth d of the cycle from row s, whose root is at s + 1."""
    kept = kept_pool_mask(pool, num_draft_tokens)
    b, n, _ = kept.shape
    reach_pool = torch.zeros(kept.shape, device=kept.device)
    out = torch.zeros(b, n, len(pool), device=kept.device)
    offset = 0
    for depth, entries in enumerate(pool, start=1):
        width = entries.tokens.shape[-1]
        p = torch.zeros(b, n, width, device=kept.device)
        for start in range(0, n, chunk):
            rows = torch.arange(start, min(start + chunk, n), device=kept.device)
            target = target_logits_at(rows + depth)  # on the lm_head's device (the last GPU of a split target)
            probs = torch.softmax(target.float() / temperature, -1)
            p[:, rows] = probs.gather(-1, entries.tokens[:, rows].to(probs.device)).to(p.device)
        parents = entries.parents
        parent_reach = torch.where(parents >= 0, reach_pool.gather(-1, parents.clamp(min=0)), 1.0)
        reach = p * parent_reach * kept[..., offset:offset + width]
        reach_pool[..., offset:offset + width] = reach
        out[..., depth - 1] = reach.sum(-1)
        offset += width
    return out


def expected_accept_length(reach: torch.Tensor) -> torch.Tensor:
    """1 + the expected number of accepted drafts: 1 + sum over depths of P(a draft at that depth)."""
    return 1 + reach.sum(-1)


def expected_by_step(reach: torch.Tensor) -> list[float | None]:
    """E[reach_j] / E[reach_{j-1}] over all rows: P(a draft at depth j | one at depth j - 1)."""
    mean = reach.reshape(-1, reach.shape[-1]).double().mean(0)
    before = torch.cat([mean.new_ones(1), mean[:-1]])
    return [float(r / b) if b > 0 else None for r, b in zip(mean, before)]


def expected_histogram(reach: torch.Tensor) -> list[float]:
    """Expected share of cycles per accept length (index = accept length, 0 .. steps + 1)."""
    flat = reach.reshape(-1, reach.shape[-1]).double()
    at_least = torch.cat([flat.new_ones(flat.shape[0], 1), flat], dim=1)  # P(length > m), m = 0..S
    exact = at_least - torch.cat([flat, flat.new_zeros(flat.shape[0], 1)], dim=1)
    return [0.0] + exact.mean(0).tolist()
