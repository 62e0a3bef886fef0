"""Model-free baselines: vLLM's ngram and suffix drafters and the accept-length simulation.

Each rule is pinned twice: by hand-derived proposals and accept lengths on small texts, and by a
plain re-implementation written here (naive loops, no shared code) on random texts with repeats.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from draftlab.probe.modelfree import Ngram, Suffix, SuffixCache, assess, simulate

# --- naive references ----------------------------------------------------------------------------


def naive_ngram(ctx: list[int], lo: int, hi: int, k: int) -> list[int]:
    """Longest n in [lo, hi] whose suffix occurs earlier; earliest occurrence; what follows it."""
    for n in range(hi, lo - 1, -1):
        for s in range(len(ctx) - n):  # s <= len - 1 - n: not the suffix itself
            if ctx[s : s + n] == ctx[len(ctx) - n :]:
                return ctx[s + n : s + n + k]
    return []


class NaiveSuffixTree:
    """Substring counts by scanning, child order replayed with string keys."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.seqs: dict[int, list[int]] = {}
        self.order: dict[tuple[int, ...], list[int]] = {}

    def count(self, x: tuple[int, ...]) -> int:
        return sum(
            1 for seq in self.seqs.values() for s in range(len(seq) - len(x) + 1)
            if tuple(seq[s : s + len(x)]) == x
        )

    def append(self, seq_id: int, token: int) -> None:
        seq = self.seqs.setdefault(seq_id, [])
        seq.append(token)
        for length in range(2, min(self.depth, len(seq)) + 1):
            parent = tuple(seq[len(seq) - length : -1])
            kids = self.order.setdefault(parent, [])
            new = self.count(parent + (token,))  # already counts this occurrence
            if token not in kids:
                kids.append(token)
                continue
            i = kids.index(token)
            if i == 0:
                continue
            prev = self.count(parent + (kids[i - 1],))
            if prev > new:
                continue
            head = min(j for j, t in enumerate(kids) if self.count(parent + (t,)) == prev)
            kids.remove(token)
            kids.insert(head, token)

    def speculate(self, pattern: list[int], k: int, factor: float, min_prob: float):
        best, best_score = [], np.float32(0)
        for m in range(1, len(pattern)):
            x = tuple(pattern[len(pattern) - m :])
            if self.count(x) == 0:
                break
            limit = max(0, min(k, int(float(np.float32(m) * np.float32(factor)) + 1e-6)))
            tokens, prob, score = [], np.float32(1), np.float32(0)
            while len(tokens) < limit and len(x) < self.depth and self.order.get(x):
                nxt = x + (self.order[x][0],)
                prob = np.float32(prob * (np.float32(self.count(nxt)) / np.float32(self.count(x))))
                if prob < np.float32(min_prob):
                    break
                tokens.append(nxt[-1])
                score = np.float32(score + prob)
                x = nxt
            if score >= best_score:
                best, best_score = tokens, score
        return best, best_score


def naive_suffix_propose(local, glob, ctx, cfg: Suffix) -> list[int]:
    pattern = ctx[-cfg.max_tree_depth :]
    args = (pattern, cfg.num_speculative_tokens, cfg.max_spec_factor, cfg.min_token_prob)
    a, b = local.speculate(*args), glob.speculate(*args)
    return a[0] if a[1] >= b[1] else b[0]


def naive_simulate(prompt, continuation, propose, commit, max_new) -> list[int]:
    """Plain greedy speculative decoding; propose(ctx) drafts, commit(tokens) feeds the drafter."""
    ctx = list(prompt) + [continuation[0]]
    commit([continuation[0]])
    out = []
    while len(ctx) - len(prompt) < max_new:
        pos = len(ctx) - len(prompt)
        draft = propose(ctx)
        ok = 0
        for i, t in enumerate(draft):
            if pos + i < len(continuation) and t == continuation[pos + i]:
                ok += 1
            else:
                break
        out.append(ok + 1)
        new = continuation[pos : pos + ok + 1]
        ctx += new
        commit(new)
    return out


def naive_suffix_run(prompts, continuations, cfg: Suffix, max_new, previous=()) -> list[list[int]]:
    """Requests one after another; the global tree keeps every response (previous ones first)."""
    glob = NaiveSuffixTree(cfg.max_tree_depth)  # stays empty without a global cache
    for i, r in enumerate(previous if cfg.global_cache else ()):
        for t in r:
            glob.append(-1 - i, t)
    runs = []
    for n, (p, c) in enumerate(zip(prompts, continuations)):
        local = NaiveSuffixTree(cfg.max_tree_depth)
        for t in p:
            local.append(0, t)

        def commit(tokens, local=local, n=n):
            for t in tokens:
                local.append(0, t)
                if cfg.global_cache:
                    glob.append(n, t)

        runs.append(
            naive_simulate(p, c, lambda ctx: naive_suffix_propose(local, glob, ctx, cfg), commit, max_new)
        )
    return runs


def repetitive(rng: random.Random, n: int, vocab: int) -> list[int]:
    """Random tokens with copied spans, so matches of several lengths and occurrences abound."""
    out: list[int] = []
    while len(out) < n:
        if out and rng.random() < 0.5:
            s = rng.randrange(len(out))
            out += out[s : s + rng.randint(1, 8)]
        else:
            out.append(rng.randrange(vocab))
    return out[:n]


# --- ngram ---------------------------------------------------------------------------------------


def ngram_propose(ctx: list[int], lo: int, hi: int, k: int) -> list[int]:
    return Ngram(lo, hi, k).start(ctx).propose()


def test_ngram_vllm_docstring_example_fewer_than_k_follow():
    # [4,2,3] never recurs, [2,3] does at 1; only three tokens follow it
    assert ngram_propose([1, 2, 3, 4, 2, 3], 2, 3, 4) == [4, 2, 3]


def test_ngram_longest_n_beats_an_earlier_shorter_match():
    ctx = [5, 3, 8, 2, 3, 6, 2, 3]
    assert ngram_propose(ctx, 1, 2, 3) == [6, 2, 3]  # [2, 3] at 3
    assert ngram_propose(ctx, 1, 1, 3) == [8, 2, 3]  # [3] earliest at 1


def test_ngram_max_n_caps_the_match():
    ctx = [1, 2, 9, 0, 1, 2, 7, 0, 1, 2]
    assert ngram_propose(ctx, 1, 3, 1) == [7]  # [0, 1, 2] at 3
    assert ngram_propose(ctx, 1, 2, 1) == [9]  # [1, 2] earliest at 0


def test_ngram_earliest_occurrence_wins():
    assert ngram_propose([7, 1, 2, 1, 3, 1], 1, 1, 2) == [2, 1]  # not [3, 1] from the later 1


def test_ngram_min_n_and_no_match():
    assert ngram_propose([4, 1, 5, 1], 2, 3, 2) == []
    assert ngram_propose([4, 1, 5, 1], 1, 3, 2) == [5, 1]
    assert ngram_propose([3], 1, 1, 2) == []


def test_ngram_match_may_overlap_the_suffix():
    assert ngram_propose([1, 1, 1], 2, 2, 3) == [1]  # [1, 1] at 0 overlaps the suffix at 1
    assert ngram_propose([1, 1, 1, 1], 2, 2, 3) == [1, 1]


def test_ngram_no_match_accepts_one_per_cycle():
    acc = simulate([1, 2, 3], [4, 5, 6, 7, 8], Ngram(1, 2, 3).start, 5)
    assert acc.accept_lengths == (1, 1, 1, 1)
    assert acc.mean_accept_length == 1.0


def test_ngram_copied_span_is_accepted_whole():
    prompt = list(range(10, 30))
    acc = simulate(prompt, list(range(15, 30)), Ngram(1, 3, 4).start, 15)
    assert acc.accept_lengths == (5, 5, 5)  # 15 -> 16..19, 20 -> 21..24, 25 -> 26..29


def test_ngram_earliest_rule_changes_the_accept_lengths():
    # context 7 1 2 1 3 | 1: the earliest [1] proposes 2 (accepted), the latest would propose 3
    acc = simulate([7, 1, 2, 1, 3], [1, 2, 5], Ngram(1, 1, 1).start, 3)
    assert acc.accept_lengths == (2,)


def test_ngram_draft_past_the_continuation_counts_as_rejected():
    acc = simulate([1, 2, 3, 1, 2, 3], [1, 2], Ngram(1, 1, 4).start, 2)
    assert acc.accept_lengths == (2,)  # draft 2 3 1 2: only 2 can be checked


@pytest.mark.parametrize("lo,hi,k", [(1, 1, 1), (1, 3, 4), (2, 4, 5), (3, 3, 2), (1, 5, 8)])
def test_ngram_matches_naive_simulation(lo, hi, k):
    rng = random.Random(lo * 100 + hi * 10 + k)
    for _ in range(20):
        text = repetitive(rng, 120, rng.choice([3, 6, 20]))
        prompt, cont = text[:50], text[50:]
        mine = simulate(prompt, cont, Ngram(lo, hi, k).start, 60).accept_lengths
        ref = naive_simulate(prompt, cont, lambda c: naive_ngram(c, lo, hi, k), lambda t: None, 60)
        assert list(mine) == ref
        assert sum(ref[:-1]) < 60 <= sum(ref) + 1


def test_assess_mean_is_over_all_cycles():
    start = Ngram(1, 3, 4).start
    result = assess([list(range(10, 30)), [1, 2, 3]], [list(range(15, 30)), [4, 5, 6]], start, 3)
    assert [r.accept_lengths for r in result.results] == [(5,), (1, 1)]
    assert result.mean_accept_length == pytest.approx(7 / 3)


# --- suffix decoding -----------------------------------------------------------------------------


def suffix_propose(ctx: list[int], **options) -> list[int]:
    return SuffixCache(Suffix(global_cache=False, **options)).start(ctx).propose()


def test_suffix_scores_paths_over_match_lengths():
    ctx = [1, 2, 3, 1, 2, 3, 1]
    # m=1: [2] (2/3); m=2: [2, 3] (1/2 each); m=3 and m=4: [2, 3, 1] (score 1.5, m=4 wins the tie)
    assert suffix_propose(ctx) == [2, 3, 1]
    assert suffix_propose(ctx, min_token_prob=0.6) == [2]  # only m=1's 2/3 clears 0.6
    assert suffix_propose(ctx, min_token_prob=0.5) == [2, 3, 1]  # a prob equal to the bound stays
    assert suffix_propose(ctx, max_spec_factor=0.5) == [2, 3]  # m=4 may draft 2 tokens
    assert suffix_propose(ctx, num_speculative_tokens=1) == [2]


def test_suffix_equal_counts_keep_the_cpp_sibling_order():
    # after 5: 1, 1, 2, 2 -> 2 moved in front of 1 on reaching 1's count (first-seen would give 1)
    assert suffix_propose([5, 1, 5, 1, 5, 2, 5, 2, 9, 5]) == [2]
    # after 5: 1, 1, 2, 3, 3 -> 3 lands after 1, the count-2 child already there (latest gives 3)
    assert suffix_propose([5, 1, 5, 1, 5, 2, 5, 3, 5, 3, 9, 5]) == [1]


def test_suffix_pattern_is_cut_to_the_tree_depth():
    ctx = [1, 2, 3, 1, 2, 3, 1]
    assert suffix_propose(ctx, max_tree_depth=2) == [2]  # m=1 only, its tree holds pairs
    assert suffix_propose(ctx, max_tree_depth=1) == []


def test_suffix_global_cache_holds_previous_responses():
    cache = SuffixCache(Suffix())
    cache.add_response([1, 2, 3, 4, 1, 2, 3, 4])
    drafter = cache.start([7, 1, 2])
    drafter.extend([3])
    assert drafter.propose() == [4, 1, 2]  # the local tree has nothing after 3
    alone = SuffixCache(Suffix(global_cache=False)).start([7, 1, 2])
    alone.extend([3])
    assert alone.propose() == []


def test_suffix_never_matches_the_whole_pattern():
    cache = SuffixCache(Suffix())
    for response in ([1, 2, 3, 4], [2, 3, 5], [2, 3, 5]):
        cache.add_response(response)
    drafter = cache.start([1, 2])
    drafter.extend([3])
    # m=2: [2, 3] -> 5 (2/3); m=3 would be the whole pattern [1, 2, 3] -> 4 (1.0), never tried
    assert drafter.propose() == [5]


def test_suffix_no_repeat_accepts_one_per_cycle():
    acc = simulate([1, 2, 3], [4, 5, 6, 7], SuffixCache(Suffix()).start, 4)
    assert acc.accept_lengths == (1, 1, 1)


@pytest.mark.parametrize(
    "cfg",
    [
        Suffix(),
        Suffix(num_speculative_tokens=4, max_tree_depth=6, global_cache=False),
        Suffix(num_speculative_tokens=8, max_tree_depth=5, max_spec_factor=2.0, min_token_prob=0.0),
        Suffix(num_speculative_tokens=3, max_tree_depth=8, max_spec_factor=0.5, min_token_prob=0.3),
    ],
)
def test_suffix_matches_naive_simulation(cfg):
    rng = random.Random(cfg.max_tree_depth)
    texts = [repetitive(rng, 70, rng.choice([3, 5, 12])) for _ in range(4)]
    prompts, conts = [t[:30] for t in texts], [t[30:] for t in texts]
    previous = [repetitive(rng, 20, 5)]
    cache = SuffixCache(cfg)
    for r in previous:
        cache.add_response(r)
    mine = [list(r.accept_lengths) for r in assess(prompts, conts, cache.start, 30).results]
    assert mine == naive_suffix_run(prompts, conts, cfg, 30, previous)
    assert any(a > 1 for run in mine for a in run)


def test_simulate_rejects_a_short_continuation():
    with pytest.raises(ValueError):
        simulate([1], [2, 3], Ngram(1, 1, 1).start, 3)
