"""Verification: which drafted tokens the target accepts, and the bonus token.

Each rule walks the tree from the root and returns the accepted path plus one token the target
chooses where the walk stops (the bonus), so every cycle commits at least one token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from draftlab.spec.tree import DraftTree


@dataclass
class Walk:
    nodes: list[int]  # accepted path, root first (indices into the tree)
    tokens: list[int]  # committed tokens: the accepted drafts, then the bonus

    @property
    def accept_length(self) -> int:
        return len(self.tokens)


def greedy_walk(tree: DraftTree, target_logits: torch.Tensor) -> Walk:
    """Descend while a child carries the target's argmax; the argmax where it stops is the bonus.

    Lossless: every committed token is the target's argmax after its own prefix, which is exactly
    what plain greedy decoding would produce.
    """
    argmax = target_logits.argmax(dim=-1).tolist()
    tokens, children = tree.tokens.tolist(), tree.children()
    node, nodes, out = 0, [0], []
    while True:
        want = argmax[node]
        out.append(want)
        nxt = next((c for c in children[node] if tokens[c] == want), None)
        if nxt is None:
            return Walk(nodes, out)
        node = nxt
        nodes.append(node)


def _uniform(generator: torch.Generator, device: torch.device) -> float:
    return float(torch.rand((), generator=generator, device=device))


def _sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


def tree_sampling_walk(tree: DraftTree, target_probs: torch.Tensor, generator: torch.Generator) -> Walk:
    """Recursive per-sibling rejection for deterministic (top-k) children, as EAGLE's
    ``evaluate_posterior`` and SGLang's ``tree_speculative_sampling_target_only``.

    At a node with target distribution p, try its children in order: accept child token x with
    probability p(x); on rejection set p(x) = 0 and renormalise, then try the next child. If all are
    rejected, sample the token from what is left of p. Lossless: this is sampling from p one
    candidate at a time (P(accept x_i) = p(x_i) unconditionally), so the token leaving each node is
    distributed exactly as p; an accepted child then repeats the rule with its own p. SGLang draws
    one coin per depth and accepts the first sibling whose cumulative p exceeds it, which gives the
    same distribution. At a fully accepted leaf the bonus is sampled from p.
    """
    tokens, children = tree.tokens.tolist(), tree.children()
    node, nodes, out = 0, [0], []
    while True:
        p = target_probs[node].clone()
        accepted = None
        for child in children[node]:
            x = tokens[child]
            if _uniform(generator, p.device) < float(p[x]):
                accepted = child
                break
            p[x] = 0.0
            p = p / p.sum()
        if accepted is None:
            out.append(_sample(p, generator))
            return Walk(nodes, out)
        out.append(tokens[accepted])
        node = accepted
        nodes.append(node)


def chain_sampling_walk(
    tree: DraftTree, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> Walk:
    """Standard speculative sampling for a chain whose drafts were sampled from q.

    ``draft_probs[i]`` is the q (over the target vocabulary) draft i was sampled from;
    ``target_probs[i]`` the target's p at chain node i (node 0 = root). Accept draft x with
    probability min(1, p(x)/q(x)); on rejection sample from norm(max(0, p - q)) and stop; after a
    fully accepted chain sample the bonus from p at the last node. Lossless (Leviathan et al. 2023,
    Chen et al. 2023): P(out = x) = min(p, q)(x) + (1 - sum min(p, q)) * norm(max(0, p - q))(x) = p(x).
    """
    tokens = tree.tokens.tolist()
    nodes, out = [0], []
    for i in range(tree.size - 1):
        x = tokens[i + 1]
        p, q = target_probs[i], draft_probs[i]
        if _uniform(generator, p.device) * float(q[x]) < float(p[x]):
            out.append(x)
            nodes.append(i + 1)
            continue
        residual = torch.clamp(p - q, min=0.0)
        out.append(_sample(residual if float(residual.sum()) > 0 else p, generator))
        return Walk(nodes, out)
    out.append(_sample(target_probs[tree.size - 1], generator))
    return Walk(nodes, out)
