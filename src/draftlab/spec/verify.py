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


def walk_tree(tree: DraftTree, target_logits: torch.Tensor, temperature: float, generator: torch.Generator) -> Walk:
    """The walk SGLang and vLLM run over top-k drafts: greedy at temperature 0, else tree sampling
    from softmax(target logits / T)."""
    if temperature == 0:
        return greedy_walk(tree, target_logits)
    return tree_sampling_walk(tree, torch.softmax(target_logits.float() / temperature, -1), generator)
