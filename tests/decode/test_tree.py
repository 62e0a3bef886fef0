import itertools

import torch

from draftlab.decode.tree import build_tree, draft_top_k, organize_draft_results, select_top_k


def _probs(pairs: dict[int, float], vocab: int = 10) -> torch.Tensor:
    p = torch.full((vocab,), 0.0)
    for t, v in pairs.items():
        p[t] = v
    return p


def _draft(step_probs, topk: int, num_draft_tokens: int, root: int = 99):
    """Drive select_top_k with per-step probability rows given by a callable(frontier tokens, step)."""
    p = step_probs(None, 0)
    top_p, top_ids = p.topk(topk)
    frontier, chunk = select_top_k(0, top_p, top_ids, None, topk)
    chunks = [chunk]
    step = 1
    while (rows := step_probs(frontier, step)) is not None:
        top_p, top_ids = rows.topk(topk, dim=-1)
        frontier, chunk = select_top_k(step, top_p, top_ids, frontier, topk)
        chunks.append(chunk)
        step += 1
    return organize_draft_results(chunks, root, num_draft_tokens), chunks


# Hand-made: root proposes a (1) 0.6, b (2) 0.32; a's children c (3) 0.5, d (4) 0.4;
# b's children e (5) 0.9, f (6) 0.05. Pool: a .6, b .32, c .30, d .24, e .288, f .016.
HAND = {None: _probs({1: 0.6, 2: 0.32, 0: 0.08}), 1: _probs({3: 0.5, 4: 0.4, 0: 0.1}), 2: _probs({5: 0.9, 6: 0.05, 0: 0.05})}


def _hand(frontier, step):
    if step == 0:
        return HAND[None]
    if step == 1:
        return torch.stack([HAND[int(t)] for t in frontier.tokens])
    return None


def test_hand_made_tree_pool_order_and_selection():
    tree, chunks = _draft(_hand, topk=2, num_draft_tokens=5)
    pool_scores = torch.cat([c.scores for c in chunks])
    assert torch.allclose(pool_scores, torch.tensor([0.6, 0.32, 0.30, 0.24, 0.288, 0.016]))
    # best 4 of the pool are a, b, c, e; kept in pool order behind the root
    assert tree.tokens.tolist() == [99, 1, 2, 3, 5]
    assert tree.parents.tolist() == [-1, 0, 0, 1, 2]
    assert tree.depth.tolist() == [0, 1, 1, 2, 2]
    expected_mask = torch.tensor([
        [1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]], dtype=torch.bool)
    assert torch.equal(tree.mask, expected_mask)
    assert tree.paths() == [[0, 1, 3], [0, 2, 4]]
    assert tree.children() == [[1, 2], [3], [4], [], []]


def test_hand_made_tree_smaller_budget_keeps_top_three():
    tree, _ = _draft(_hand, topk=2, num_draft_tokens=4)
    assert tree.tokens.tolist() == [99, 1, 2, 3]  # a .6, b .32, c .30 (e .288 just misses)
    assert tree.parents.tolist() == [-1, 0, 0, 1]


def test_frontier_is_best_k_children_with_parent_rows_and_pool_indices():
    p = HAND[None]
    top_p, top_ids = p.topk(2)
    frontier, _ = select_top_k(0, top_p, top_ids, None, 2)
    top_p, top_ids = torch.stack([HAND[1], HAND[2]]).topk(2, dim=-1)
    frontier, chunk = select_top_k(1, top_p, top_ids, frontier, 2)
    assert frontier.tokens.tolist() == [3, 5]  # c .30, e .288 beat d .24
    assert frontier.rows.tolist() == [0, 1]
    assert frontier.pool_index.tolist() == [2, 4]
    assert chunk.parents.tolist() == [0, 0, 1, 1]


def _brute_force(model, vocab, topk, steps, n):
    """Independent rendering of the rule: explicit pool of (score, token path) entries."""
    root = model(())
    pool = []  # (score, path)
    frontier = []
    for t in sorted(range(vocab), key=lambda t: -root[t])[:topk]:
        pool.append((root[t], (t,)))
        frontier.append((root[t], (t,)))
    for _ in range(1, steps):
        children = []
        for score, path in frontier:
            p = model(path)
            for t in sorted(range(vocab), key=lambda t: -p[t])[:topk]:
                children.append((score * p[t], path + (t,)))
        pool += children
        frontier = sorted(children, key=lambda c: -c[0])[:topk]
    best = sorted(pool, key=lambda c: -c[0])[: n - 1]
    return {path for _, path in best}


def _tensor_tree(model, topk, steps, n):
    """Drive select_top_k / organize_draft_results with the same model, tracking frontier paths."""
    top_p, top_ids = torch.tensor(model(())).topk(topk)
    frontier, chunk = select_top_k(0, top_p, top_ids, None, topk)
    chunks, paths = [chunk], [(int(t),) for t in frontier.tokens]
    for step in range(1, steps):
        top_p, top_ids = torch.tensor([model(p) for p in paths]).topk(topk, dim=-1)
        frontier, chunk = select_top_k(step, top_p, top_ids, frontier, topk)
        chunks.append(chunk)
        paths = [paths[int(r)] + (int(t),) for t, r in zip(frontier.tokens, frontier.rows)]
    return organize_draft_results(chunks, 0, n)


def test_random_trees_match_brute_force():
    vocab = 6
    for seed, (topk, steps, n) in itertools.product(range(5), [(2, 2, 4), (2, 3, 6), (3, 3, 9), (4, 4, 8), (1, 4, 5)]):
        g = torch.Generator().manual_seed(seed)
        cache: dict[tuple, list[float]] = {}

        def model(path):
            if path not in cache:
                cache[path] = torch.softmax(2 * torch.randn(vocab, generator=g, dtype=torch.float64), -1).tolist()
            return cache[path]

        tree = _tensor_tree(model, topk, steps, n)
        got = set()
        for i in range(1, tree.size):
            path, node = [], i
            while node > 0:
                path.append(int(tree.tokens[node]))
                node = int(tree.parents[node])
            got.add(tuple(reversed(path)))
            assert int(tree.depth[i]) == len(path)
        assert got == _brute_force(model, vocab, topk, steps, n), (seed, topk, steps, n)
        assert tree.size == n and (tree.parents[1:] >= 0).all()


def test_mask_is_ancestors_and_self():
    tree = build_tree(7, torch.tensor([1, 2, 3, 4]), torch.tensor([0, 1, 0, 3]))
    for i in range(tree.size):
        ancestors, node = {i}, i
        while node > 0:
            node = int(tree.parents[node])
            ancestors.add(node)
        assert {j for j in range(tree.size) if tree.mask[i, j]} == ancestors


def test_topk_one_drafts_the_first_maximum_with_score_one_as_sglang():
    """SGLang's draft step at topk 1 is argmax(logits) with score 1.0; softmax(...).topk(1) picks a later
    index of a tie on the CPU (here 2)."""
    scores, ids = draft_top_k(torch.tensor([1.0, 3.0, 3.0, 0.0, 3.0]), 1)
    assert ids.tolist() == [1] and scores.tolist() == [1.0] and scores.dtype == torch.float32
    scores, ids = draft_top_k(torch.zeros(2, 3, 40), 1)  # the probe's leading dims; every logit tied
    assert ids.shape == (2, 3, 1) and ids.eq(0).all() and scores.eq(1.0).all()


def test_topk_above_one_is_the_softmax_top_k():
    logits = torch.tensor([[0.5, 2.0, -1.0, 1.0], [3.0, 0.0, 1.0, 2.0]])
    scores, ids = draft_top_k(logits, 2)
    assert ids.tolist() == [[1, 3], [0, 3]]
    assert torch.allclose(scores, torch.softmax(logits, -1).gather(-1, ids))


def test_a_batch_of_cycles_builds_each_rows_own_tree():
    """The batched decoder builds every row's tree at once (leading dimension): each equals the tree
    built from that row's pool alone, orphans included (exact ties that keep a child and drop its parent)."""
    gen = torch.Generator().manual_seed(0)
    topk, steps, batch = 3, 4, 6
    chunks, frontier = [], None
    for step in range(steps):
        shape = (batch, topk) if step == 0 else (batch, topk, topk)
        probs = torch.rand(*shape[:-1], 12, generator=gen).softmax(-1)
        probs[1] = torch.nn.functional.one_hot(torch.tensor(step), 12).float()  # row 1: certain drafts, tied zeros
        top_p, top_ids = probs.topk(topk, dim=-1)
        frontier, chunk = select_top_k(step, top_p, top_ids, frontier, topk)
        chunks.append(chunk)
    roots = torch.arange(50, 50 + batch)
    orphans = 0
    for tokens in (2, 8, 16):
        trees = organize_draft_results(chunks, roots, tokens)
        for i in range(batch):
            alone = organize_draft_results([type(c)(c.scores[i], c.tokens[i], c.parents[i]) for c in chunks],
                                           int(roots[i]), tokens)
            row = trees.row(i)
            for field in ("tokens", "parents", "depth", "mask"):
                assert torch.equal(getattr(row, field), getattr(alone, field)), (tokens, i, field)
            orphans += int((alone.parents[1:] < 0).sum())
        assert trees.size == tokens
    assert orphans  # the tied row keeps children whose parents it dropped
