"""Verification: which drafted tokens the target accepts, and the bonus token.

Each rule walks the tree from the root and returns the accepted path plus one token the target
chooses where the walk stops (the bonus), so every cycle commits at least one token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from draftlab.decode.tree import DraftTree, children_of


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
    return _greedy_path(*_read_back(tree, target_logits))


def _read_back(trees: DraftTree, target_logits: torch.Tensor) -> list[list]:
    """The tree(s)' tokens and parents and the target's argmax at each node, in one copy to the host (not
    three). The logits may sit on another GPU than the tree (a target split across GPUs)."""
    argmax = target_logits.argmax(dim=-1).to(trees.tokens.device)
    return torch.stack([trees.tokens, trees.parents, argmax]).tolist()


def _greedy_path(tokens: list[int], parents: list[int], argmax: list[int]) -> Walk:
    """:func:`greedy_walk` over a tree and the target's argmax per node, read back to the host."""
    children = children_of(parents)
    node, nodes, out = 0, [0], []
    while True:
        want = argmax[node]
        out.append(want)
        nxt = next((c for c in children[node] if tokens[c] == want), None)
        if nxt is None:
            return Walk(nodes, out)
        node = nxt
        nodes.append(node)


def tree_sampling_walk(tree: DraftTree, target_probs: torch.Tensor, generator: torch.Generator) -> Walk:
    """SGLang's sampling walk over deterministic (top-k) children, with fresh coins: one uniform per
    tree node and one for the final sample, as SGLang draws them (:func:`sampling_walk`)."""
    coins = torch.rand(tree.size + 1, generator=generator, device=target_probs.device).tolist()
    return sampling_walk(tree, target_probs, coins[:-1], coins[-1])


def sampling_walk(tree: DraftTree, target_probs: torch.Tensor, coins: list[float], final_coin: float) -> Walk:
    """SGLang's ``tree_speculative_sampling_target_only`` (thresholds at their defaults, 1.0 / 1.0).

    At a node with target distribution p and coin u (``coins[node]``), its children are tried in
    pool order (SGLang's retrieve lists): child i is accepted when u < p(x_1) + ... + p(x_i), and
    the walk moves to it with its own coin. When none is, the bonus is drawn from what is left of p
    (p with the tried children's tokens zeroed) by inverse CDF at ``final_coin``; at a leaf that is
    p itself. Each child x is accepted with probability p(x) and the leftover is p restricted to the
    other tokens, so the token leaving each node follows p exactly (lossless), as in EAGLE's
    recursive per-sibling rejection.
    """
    tokens, children = tree.tokens.tolist(), tree.children()
    node, nodes, out = 0, [0], []
    while True:
        p = target_probs[node].double()
        total, tried, accepted = 0.0, [], None
        for child in children[node]:
            total += float(p[tokens[child]])
            tried.append(tokens[child])
            if coins[node] < total:
                accepted = child
                break
        if accepted is None:
            left = p.clone()
            left[tried] = 0.0
            if not tried or bool((left > 0).any()):
                out.append(_inverse_cdf(left, final_coin))
                return Walk(nodes, out)
            accepted = children[node][-1]  # float rounding: the children hold all of p
        out.append(tokens[accepted])
        node = accepted
        nodes.append(node)


def _inverse_cdf(weights: torch.Tensor, coin: float) -> int:
    """The first index whose cumulative weight exceeds ``coin`` x the total (weights >= 0, not all 0)."""
    cdf = weights.cumsum(0)
    index = int(torch.searchsorted(cdf, coin * cdf[-1], right=True))
    return min(index, int(torch.nonzero(weights).max()))


def walk_trees(trees: DraftTree, target_logits: torch.Tensor, temperature: float,
               generator: torch.Generator) -> list[Walk]:
    """:func:`walk_tree` of each of a batch of trees (``target_logits`` [B, N, V]), in row order. At
    temperature 0 the trees and the target's argmax are read back once for the whole batch."""
    if temperature == 0:
        return [_greedy_path(*row) for row in zip(*_read_back(trees, target_logits), strict=True)]
    return [walk_tree(trees.row(i), target_logits[i], temperature, generator) for i in range(len(target_logits))]


def walk_tree(tree: DraftTree, target_logits: torch.Tensor, temperature: float, generator: torch.Generator) -> Walk:
    """The walk SGLang and vLLM run over top-k drafts: greedy at temperature 0, else tree sampling
    from softmax(target logits / T)."""
    if temperature == 0:
        return greedy_walk(tree, target_logits)
    return tree_sampling_walk(tree, torch.softmax(target_logits.float() / temperature, -1), generator)
