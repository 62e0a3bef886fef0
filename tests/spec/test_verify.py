import torch
from stats import chi_square_p

from draftlab.spec.tree import build_tree
from draftlab.spec.verify import greedy_walk, tree_sampling_walk

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
