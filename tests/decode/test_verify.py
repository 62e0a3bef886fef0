import torch
from stats import chi_square_p

from draftlab.decode.tree import build_tree
from draftlab.decode.verify import greedy_walk, sampling_walk, tree_sampling_walk

# root(9) -> a(1), b(2); a -> c(3); b -> d(4)
TREE = build_tree(9, torch.tensor([1, 2, 3, 4]), torch.tensor([0, 0, 1, 2]))


def _logits_with_argmax(argmax: list[int], vocab: int = 10) -> torch.Tensor:
    logits = torch.zeros(len(argmax), vocab)
    logits[torch.arange(len(argmax)), torch.tensor(argmax)] = 5.0
    return logits


def test_greedy_descends_through_second_sibling_and_takes_bonus_at_leaf():
    walk = greedy_walk(TREE, _logits_with_argmax([2, 0, 4, 0, 7]))
    assert walk.nodes == [0, 2, 4]
    assert walk.tokens == [2, 4, 7] and walk.accept_length == 3


def test_greedy_stops_at_root_when_no_child_matches():
    walk = greedy_walk(TREE, _logits_with_argmax([5, 3, 4, 0, 0]))
    assert walk.nodes == [0] and walk.tokens == [5]


def test_greedy_stops_mid_tree_with_the_target_token_as_bonus():
    walk = greedy_walk(TREE, _logits_with_argmax([1, 8, 0, 0, 0]))
    assert walk.nodes == [0, 1] and walk.tokens == [1, 8]


def _random_probs(n, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(1.5 * torch.randn(n, vocab, generator=g, dtype=torch.float64), -1)


def test_tree_sampling_first_two_tokens_follow_the_target():
    vocab = 5
    tree = build_tree(0, torch.tensor([1, 2, 3, 4]), torch.tensor([0, 0, 1, 2]))  # root->1->3, root->2->4
    probs = _random_probs(tree.size, vocab, 0)
    g = torch.Generator().manual_seed(1)
    samples = []
    for _ in range(6000):
        walk = tree_sampling_walk(tree, probs, g)
        samples.append(tuple(walk.tokens[:2]) if len(walk.tokens) > 1 else (walk.tokens[0], None))
    # exact: first token ~ p_root; second token ~ p at that child when the child is in the tree
    node_of = {1: 1, 2: 2}
    exact = {}
    for x in range(vocab):
        px = float(probs[0, x])
        if x in node_of:
            for y in range(vocab):
                exact[(x, y)] = px * float(probs[node_of[x], y])
        else:
            exact[(x, None)] = px
    assert chi_square_p(samples, exact) > 1e-3


def _sglang_tree_sampling(tree, probs, coins, final_coin, num_speculative_tokens):
    """sgl-kernel's TreeSpeculativeSamplingTargetOnly for one request, line by line (threshold_single =
    threshold_acc = 1.0, SGLang's defaults), over retrieve lists linked as build_tree_efficient links them
    (each node pushed to the front of its parent's list, last node first: siblings in index order)."""
    n, vocab = tree.size, probs.shape[-1]
    next_token, next_sibling = [-1] * n, [-1] * n
    for i in range(n - 1, 0, -1):
        parent = int(tree.parents[i])
        if parent < 0:
            continue  # "invalid eagle tree": left out
        next_sibling[i], next_token[parent] = next_token[parent], i
    candidates = tree.tokens.tolist()
    draft_probs = torch.zeros(n, vocab, dtype=probs.dtype)
    prob_acc, row, coin, accepted, cur = 0.0, 0, coins[0], [], 0
    for _ in range(1, num_speculative_tokens):
        cur = next_token[cur]
        while cur != -1:
            x = candidates[cur]
            single = float(probs[row, x])
            prob_acc += single
            if coin <= prob_acc / 1.0 or single >= 1.0:
                prob_acc, row, coin = 0.0, cur, coins[cur]
                accepted.append(cur)
                break
            draft_probs[row, x] = probs[row, x]
            cur = next_sibling[cur]
        if cur == -1:
            break
    q = probs[row]
    p = draft_probs[row] if len(accepted) != num_speculative_tokens - 1 else torch.zeros_like(q)
    relu = (q - p).clamp(min=0)
    u = final_coin * float(relu.sum())
    above = ((relu.cumsum(0) > u) & (relu > 0)).nonzero()
    sampled = int(above[0]) if len(above) else vocab - 1
    return [0] + accepted, [candidates[a] for a in accepted] + [sampled]


def _random_tree(g, vocab):
    """A tree of up to 12 nodes, depth up to 4, siblings with distinct tokens (children of one top-k row)."""
    parents, depth, tokens, used = [], [0], [], {0: set()}
    for node in range(1, int(torch.randint(2, 13, (), generator=g))):
        options = [p for p in range(node) if depth[p] < 4 and len(used[p]) < vocab]
        parent = options[int(torch.randint(len(options), (), generator=g))]
        token = [t for t in torch.randperm(vocab, generator=g).tolist() if t not in used[parent]][0]
        used[parent].add(token)
        used[node] = set()
        parents.append(parent)
        depth.append(depth[parent] + 1)
        tokens.append(token)
    return build_tree(7, torch.tensor(tokens), torch.tensor(parents)), max(depth)


def test_sampling_walk_is_sglangs_kernel_for_the_same_coins():
    g = torch.Generator().manual_seed(0)
    accepted_any = 0
    for trial in range(400):
        tree, depth = _random_tree(g, 6)
        probs = torch.softmax(2.0 * torch.randn(tree.size, 6, generator=g, dtype=torch.float64), -1)
        coins = torch.rand(tree.size + 1, generator=g, dtype=torch.float64).tolist()
        walk = sampling_walk(tree, probs, coins[:-1], coins[-1])
        assert (walk.nodes, walk.tokens) == _sglang_tree_sampling(tree, probs, coins[:-1], coins[-1], depth + 1)
        accepted_any += len(walk.nodes) > 1
    assert accepted_any > 100  # acceptance at every depth is exercised, not only the bonus


def test_tree_sampling_walk_draws_sglangs_coins():
    """One coin per tree node (SGLang's uniform_samples [num_draft_tokens]), then the final-sampling coin."""
    g = torch.Generator().manual_seed(3)
    for seed in range(100):
        tree, depth = _random_tree(g, 6)
        probs = torch.softmax(2.0 * torch.randn(tree.size, 6, generator=g), -1)
        coins = torch.rand(tree.size + 1, generator=torch.Generator().manual_seed(seed)).tolist()
        walk = tree_sampling_walk(tree, probs, torch.Generator().manual_seed(seed))
        assert (walk.nodes, walk.tokens) == _sglang_tree_sampling(tree, probs.double(), coins[:-1], coins[-1],
                                                                  depth + 1)


def test_sampling_walk_accepts_the_last_child_when_rounding_leaves_no_mass_outside_the_children():
    """p's mass is all on the children but sums below the coin (as rounding can leave it): SGLang would
    sample vocabulary id V - 1 from an empty leftover; draftlab accepts the last child tried."""
    tree = build_tree(0, torch.tensor([1, 2]), torch.tensor([0, 0]))
    probs = torch.zeros(3, 5, dtype=torch.float64)
    probs[0, 1], probs[0, 2] = 0.3, 0.6
    probs[1:, 4] = 1.0
    walk = sampling_walk(tree, probs, [0.95, 0.5, 0.5], 0.5)
    assert walk.nodes == [0, 2] and walk.tokens == [2, 4]
