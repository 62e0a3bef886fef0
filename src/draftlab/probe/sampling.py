"""Temperature > 0: the expected acceptance of a chain, along the text (an estimate).

SGLang and vLLM draft the drafter's top-1 token x at every temperature and verify it by sampling
(SGLang's ``tree_speculative_sampling_target_only``, vLLM's rejection sampler without draft
probabilities): draft j, given drafts 1..j-1 were accepted, is accepted with probability
alpha_j = p(x_j), p being the target's distribution at temperature T after the same prefix. Along a
text (the target's sampled continuation), a cycle rooted at each position then has expected accept
length 1 + sum_j prod_{i <= j} alpha_i. It is an estimate: the real prefixes of later drafts are the
accepted drafts, not the text's own tokens.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def chain_alphas(draft_logits: list[torch.Tensor], target_logits_at, draft_to_target: torch.Tensor,
                 temperature: float, chunk: int = 256) -> torch.Tensor:
    """alpha [B, n, steps]: the drafter's top-1 of ``draft_logits[j-1]`` [B, n, Vd] under the target's
    distribution at position s + j, whose logits ``target_logits_at(positions)`` returns ([B, len(positions), V])."""
    b, n, _ = draft_logits[0].shape
    out = torch.zeros(b, n, len(draft_logits), device=draft_logits[0].device)
    for j, logits in enumerate(draft_logits, start=1):
        drafts = draft_to_target.to(logits.device)[logits.argmax(-1)]  # [B, n] target ids
        for start in range(0, n, chunk):
            rows = torch.arange(start, min(start + chunk, n), device=logits.device)
            target = target_logits_at(rows + j)  # on the lm_head's device (the last GPU of a split target)
            p = torch.softmax(target.float() / temperature, -1)
            picked = p.gather(-1, drafts[:, rows, None].to(p.device))[..., 0]
            out[:, rows, j - 1] = picked.to(out.device)
    return out


def expected_accept_length(alpha: torch.Tensor) -> torch.Tensor:
    """1 + sum_j prod_{i <= j} alpha_i over the last dim."""
    return 1 + alpha.cumprod(-1).sum(-1)


def expected_by_step(alpha: torch.Tensor) -> list[float | None]:
    """E[prod_{i <= j} alpha_i] / E[prod_{i < j} alpha_i] over all rows: P(draft j | drafts < j)."""
    reach = alpha.reshape(-1, alpha.shape[-1]).double().cumprod(-1).mean(0)
    before = torch.cat([reach.new_ones(1), reach[:-1]])
    return [float(r / b) if b > 0 else None for r, b in zip(reach, before)]


def expected_histogram(alpha: torch.Tensor) -> list[float]:
    """Expected share of cycles per accept length (index = accept length, 0 .. steps + 1)."""
    flat = alpha.reshape(-1, alpha.shape[-1]).double()
    reach = torch.cat([flat.new_ones(flat.shape[0], 1), flat.cumprod(-1)], dim=1)  # P(length > m), m = 0..S
    exact = reach - torch.cat([reach[:, 1:], reach.new_zeros(reach.shape[0], 1)], dim=1)
    return [0.0] + exact.mean(0).tolist()
