"""SGLang's dynamic draft tree (EAGLE-2 style), as pure functions over tensors.

One cycle drafts ``steps`` times from the root (the last verified token):

- step 0 (:func:`select_top_k`): the root's top-k draft tokens are the first ``k`` pool entries
  and the frontier; their score is the drafter's probability;
- step i > 0: each of the k frontier nodes proposes its top-k children, scored parent score x
  child probability; all k*k children enter the pool (row-major: frontier row, then child rank)
  and the best k become the next frontier (in descending score, as ``torch.topk`` returns them);
- :func:`organize_draft_results`: of the ``k + (steps - 1) * k**2`` pool entries the best
  ``num_draft_tokens - 1`` by score are kept *in pool order* behind the root. A child's score never
  exceeds its parent's, so a kept node's parent is kept too (barring exact ties).

This mirrors ``select_top_k_tokens`` (spec_utils.py) and ``organize_draft_results`` /
``build_tree_kernel_efficient`` (eagle_utils.py) in SGLang; a chain is topk = 1. Every draft step
takes its candidates from :func:`draft_top_k`, SGLang's pick of a drafter's top-k.

Orphans: when exact score ties keep a child but drop its parent, SGLang's tree kernel prints
"invalid eagle tree" and leaves the child out of its retrieve lists; here it gets parent -1. Either
way no walk reaches it, so it is verified (a wasted slot) but never accepted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Frontier:
    """The nodes the drafter expands at the next step."""

    tokens: torch.Tensor  # [k] target token ids
    scores: torch.Tensor  # [k] cumulative draft probability
    rows: torch.Tensor  # [k] which node of the previous frontier each came from (0 at step 0: the root)
    pool_index: torch.Tensor  # [k] each node's index in the pool


@dataclass
class PoolChunk:
    """The pool entries one step adds, in pool order."""

    scores: torch.Tensor  # [m]
    tokens: torch.Tensor  # [m]
    parents: torch.Tensor  # [m] pool index of each entry's parent, -1 for the root


def draft_top_k(logits: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A draft step's candidates over the last dim of the drafter's ``logits``: (scores, draft ids).

    As SGLang's draft step picks them: topk 1 is ``argmax(logits)``, the first maximum under exact
    ties, with score 1.0, as its spec-v2 worker does on CUDA (its v1 worker's ``torch.max`` of the
    softmax gives the same first maximum; a chain keeps every node, so scores decide nothing).
    topk > 1 is ``torch.topk`` of the softmax, in descending probability (ties in the order
    torch.topk gives, which PyTorch does not define, on the GPU as here).
    """
    if topk == 1:
        ids = logits.argmax(dim=-1, keepdim=True)
        return torch.ones(ids.shape, dtype=torch.float32, device=ids.device), ids
    scores, ids = torch.softmax(logits.float(), -1).topk(topk, dim=-1)
    return scores, ids


def select_top_k(
    step: int, top_p: torch.Tensor, top_ids: torch.Tensor, frontier: Frontier | None, topk: int
) -> tuple[Frontier, PoolChunk]:
    """One drafting step: pool entries and the next frontier.

    ``top_p``/``top_ids``: at step 0 the root's top-k probabilities and target ids ``[..., k]``; later
    ``[..., k, k]``, row r holding the top-k children of ``frontier`` node r. Leading dimensions are
    independent cycles (the offline probe drafts every position at once).
    """
    if step == 0:
        index = torch.arange(topk, device=top_p.device).expand_as(top_p)
        chunk = PoolChunk(top_p, top_ids, torch.full_like(index, -1))
        return Frontier(top_ids, top_p, torch.zeros_like(index), index), chunk
    assert frontier is not None
    expand = (frontier.scores[..., :, None] * top_p).flatten(-2)  # [..., k*k], row-major
    ids = top_ids.flatten(-2)
    parents = frontier.pool_index[..., :, None].expand(*frontier.pool_index.shape, topk).flatten(-2)  # row-major
    chunk = PoolChunk(expand, ids, parents)
    best_scores, best = torch.topk(expand, topk, dim=-1)
    offset = topk + (step - 1) * topk * topk
    return Frontier(ids.gather(-1, best), best_scores, best // topk, offset + best), chunk


@dataclass
class DraftTree:
    """The tree verified in one target pass; node 0 is the root (the last verified token). Leading
    dimensions, where :func:`build_tree` was given them, are independent trees of one size (a batch's
    rows): :meth:`row` is one of them."""

    tokens: torch.Tensor  # [N] target ids
    parents: torch.Tensor  # [N] parent node, -1 for the root (and for a node whose parent was not kept)
    depth: torch.Tensor  # [N] 0 for the root
    mask: torch.Tensor  # [N, N] bool: node i attends node j (its ancestors and itself)

    @property
    def size(self) -> int:
        return int(self.tokens.shape[-1])

    def row(self, index: int) -> DraftTree:
        """Tree ``index`` of a batch of trees."""
        return DraftTree(self.tokens[index], self.parents[index], self.depth[index], self.mask[index])

    def children(self) -> list[list[int]]:
        """Each node's children in pool order (the order SGLang's retrieve lists visit siblings)."""
        return children_of(self.parents.tolist())

    def paths(self) -> list[list[int]]:
        """Every root-to-leaf path as node indices (SGLang's retrieve paths), leaves in index order."""
        parents = self.parents.tolist()
        has_child = {p for p in parents if p >= 0}
        out = []
        for leaf in range(self.size):
            if leaf in has_child:
                continue
            path = [leaf]
            while parents[path[-1]] >= 0:
                path.append(parents[path[-1]])
            if path[-1] == 0:  # skip orphans
                out.append(path[::-1])
        return out


def children_of(parents: list[int]) -> list[list[int]]:
    """Each node's children, in node order, from the parent of each node (-1: none)."""
    kids: list[list[int]] = [[] for _ in parents]
    for node, parent in enumerate(parents):
        if parent >= 0:
            kids[parent].append(node)
    return kids


def build_tree(root: int | torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor) -> DraftTree:
    """A tree from its drafted nodes; ``parents`` index nodes (0 = root), each below its own index, or
    are -1 for an orphan (in the mask below the root, never reached by a walk). Leading dimensions of
    ``tokens``/``parents`` (and of a tensor ``root``) are independent trees.

    Built on the tokens' device without reading anything back (a decode cycle queues it behind its
    draft passes): the mask is the ancestor closure of the parent links, by repeated squaring."""
    *lead, m = tokens.shape
    n = m + 1
    device = tokens.device
    roots = torch.full((*lead, 1), root, device=device, dtype=torch.long) if isinstance(root, int) \
        else root.reshape(*lead, 1).long()
    all_tokens = torch.cat([roots, tokens.long()], dim=-1)
    all_parents = torch.cat([torch.full((*lead, 1), -1, device=device, dtype=torch.long), parents.long()], dim=-1)
    hops = torch.eye(n, dtype=torch.float32, device=device)  # 0/1 in float: squared by a matmul
    if lead:
        hops = hops.repeat(*lead, 1, 1)
    hops[..., 1:, :].scatter_(-1, parents.long().clamp(min=0)[..., None], 1.0)  # orphans hang under the root
    reach, span = hops, 1
    while span < n - 1:  # reach covers paths of up to `span` hops
        reach, span = (reach @ reach).clamp_(max=1.0), span * 2
    mask = reach > 0
    return DraftTree(all_tokens, all_parents, mask.sum(-1) - 1, mask)


def organize_draft_results(chunks: list[PoolChunk], root: int | torch.Tensor, num_draft_tokens: int) -> DraftTree:
    """Keep the best ``num_draft_tokens - 1`` pool entries (in pool order) under ``root``; on the pool's
    device, without reading it back. Leading dimensions of the chunks (and of a tensor ``root``) are
    independent cycles, one tree each (a batch's rows)."""
    scores = torch.cat([c.scores for c in chunks], dim=-1)
    tokens = torch.cat([c.tokens for c in chunks], dim=-1)
    pool_parents = torch.cat([c.parents for c in chunks], dim=-1)
    kept = kept_pool_indices(scores, num_draft_tokens)
    nodes = torch.arange(1, kept.shape[-1] + 1, device=kept.device).expand_as(kept)
    node_of_pool = torch.full_like(pool_parents, -1).scatter_(-1, kept, nodes)  # tree node of each pool entry
    kept_parents = pool_parents.gather(-1, kept)
    parents = node_of_pool.gather(-1, kept_parents.clamp(min=0)).masked_fill(kept_parents < 0, 0)  # 0: the root
    return build_tree(root, tokens.gather(-1, kept), parents)


def kept_pool_indices(scores: torch.Tensor, num_draft_tokens: int) -> torch.Tensor:
    """Pool indices of the best ``num_draft_tokens - 1`` entries by score, in pool order (last dim)."""
    return torch.sort(torch.topk(scores, num_draft_tokens - 1, dim=-1).indices, dim=-1).values


def kept_pool_mask(chunks: list[PoolChunk], num_draft_tokens: int) -> torch.Tensor:
    """[..., pool] bool: which entries of the pool the cycle verifies (leading dims: independent cycles)."""
    scores = torch.cat([c.scores for c in chunks], dim=-1)
    return torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, kept_pool_indices(scores, num_draft_tokens), True)
