"""The decode loop on a synthetic pair whose greedy output and sampling distribution are exact."""

import pytest
import torch
from spec_fakes import greedy_reference, make_pair
from stats import chi_square_p

import draftlab.decode.verify as verify_mod
from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.decode.metrics import accept_stats
from draftlab.decode.verify import Walk
from draftlab.engines.sglang_flags import resolve_spec_flags
from draftlab.errors import DraftlabError

PROMPTS = [[1, 2, 3], [5], [7, 7, 0, 1], [4, 6]]
CONFIGS = [(3, 1, 4), (2, 2, 4), (4, 4, 8), (5, 4, 8), (1, 1, 2)]


def _run(dec, prompt, **kw):
    commits = list(dec.stream(prompt, **kw))
    return [t for c in commits for t in c.tokens], commits


@pytest.mark.parametrize("cfg", CONFIGS)
def test_greedy_speculative_equals_target_greedy_with_real_acceptance(cfg):
    target, drafter = make_pair(8, draft_ids=[0, 1, 2, 4, 5, 7])
    dec = SpeculativeDecoder(target, drafter, resolve_spec_flags(*cfg))
    lengths = []
    for prompt in PROMPTS:
        out, commits = _run(dec, prompt, max_new_tokens=30)
        assert out == greedy_reference(target.table, prompt, 30)
        assert commits[0].accept_length is None and len(commits[0].tokens) == 1
        lengths += [c.accept_length for c in commits[1:]]
    steps = cfg[0]
    assert all(1 <= n <= steps + 1 for n in lengths)
    assert accept_stats(lengths).mean_accept_length > 1.2


def test_baseline_without_drafter_is_plain_greedy_one_token_per_cycle():
    target, _ = make_pair(8)
    out, commits = _run(SpeculativeDecoder(target, None, None), [3, 1], max_new_tokens=12)
    assert out == greedy_reference(target.table, [3, 1], 12)
    assert [c.accept_length for c in commits[1:]] == [1] * 11


def test_drafter_runs_steps_passes_per_cycle_and_caches_hold_only_committed_tokens():
    target, drafter = make_pair(8)
    dec = SpeculativeDecoder(target, drafter, resolve_spec_flags(4, 2, 6))
    prompt, produced, cycles = [1, 2, 3], 0, 0
    for commit in dec.stream(prompt, max_new_tokens=25):
        produced += commit.accept_length or 1
        if commit.accept_length is not None:
            cycles += 1
            # the target keeps root + accepted drafts; the bonus is the next root, not yet cached
            assert target.cache_len == len(prompt) + produced - 1
            # the drafter dropped its draft entries and has not yet extended over this cycle
            assert drafter.cache_len == target.cache_len - commit.accept_length
    # prompt extend, then per cycle (steps - 1) draft passes and one extend (none after the last)
    assert drafter.forwards == 1 + cycles * 3 + (cycles - 1)
    assert target.forwards == 1 + cycles


def test_last_cycle_is_trimmed_but_its_accept_length_counts_all_tokens():
    target, drafter = make_pair(8, noise=0.0)  # a perfect drafter: every draft accepted
    dec = SpeculativeDecoder(target, drafter, resolve_spec_flags(3, 1, 4))
    out, commits = _run(dec, [1, 2], max_new_tokens=7)
    assert len(out) == 7 and out == greedy_reference(target.table, [1, 2], 7)
    assert [c.accept_length for c in commits[1:]] == [4, 4]
    assert [len(c.tokens) for c in commits] == [1, 4, 2]


def test_max_new_tokens_one_runs_no_cycle():
    target, drafter = make_pair(8)
    out, commits = _run(SpeculativeDecoder(target, drafter, resolve_spec_flags(3, 1, 4)), [1, 2], max_new_tokens=1)
    assert len(out) == 1 and len(commits) == 1


def test_eos_stops_generation_unless_ignored():
    probe, _ = make_pair(8)
    ref = greedy_reference(probe.table, [1, 2, 3], 30)
    eos = ref[5]
    first = ref.index(eos)
    target, drafter = make_pair(8, eos={eos})
    dec = SpeculativeDecoder(target, drafter, resolve_spec_flags(2, 2, 4))
    out, _ = _run(dec, [1, 2, 3], max_new_tokens=30)
    assert out == ref[: first + 1]
    out, _ = _run(dec, [1, 2, 3], max_new_tokens=30, ignore_eos=True)
    assert out == ref


def test_generation_stops_before_running_past_the_context():
    target, drafter = make_pair(8, context=12)
    dec = SpeculativeDecoder(target, drafter, resolve_spec_flags(3, 1, 4))
    out, _ = _run(dec, [1, 2, 3], max_new_tokens=50)
    # the last token never enters the target, so prompt + out may be one past the context
    assert 0 < len(out) <= 12 - 3 + 1 and out == greedy_reference(target.table, [1, 2, 3], len(out))
    with pytest.raises(DraftlabError, match="context is 12"):
        list(dec.stream(list(range(8)) * 2, max_new_tokens=5))


def test_bad_arguments_raise_one_line_errors():
    target, drafter = make_pair(8)
    dec = SpeculativeDecoder(target, drafter, resolve_spec_flags(3, 1, 4))
    with pytest.raises(DraftlabError, match="empty"):
        list(dec.stream([], max_new_tokens=3))
    with pytest.raises(DraftlabError, match="max_new_tokens"):
        list(dec.stream([1], max_new_tokens=0))
    with pytest.raises(DraftlabError, match="needs flags"):
        SpeculativeDecoder(target, drafter, None)
    with pytest.raises(DraftlabError, match="larger than the drafter's vocabulary"):
        SpeculativeDecoder(target, drafter, resolve_spec_flags(2, 9, 4))


# -- sampling preserves the target's distribution ---------------------------------------------

VOCAB, PROMPT, T = 5, [1, 2], 1.0


def _exact_three(table):
    """Exact joint distribution of the first three sampled tokens after PROMPT."""
    def p(prev, cur):
        return torch.softmax(table[prev, cur].double() / T, -1)
    exact = {}
    p0 = p(PROMPT[0], PROMPT[1])
    for a in range(VOCAB):
        p1 = p(PROMPT[1], a)
        for b in range(VOCAB):
            p2 = p(a, b)
            for c in range(VOCAB):
                exact[(a, b, c)] = float(p0[a] * p1[b] * p2[c])
    return exact


def _samples(dec, n):
    return [tuple(_run(dec, PROMPT, max_new_tokens=3, temperature=T, seed=s)[0]) for s in range(n)]


@pytest.mark.parametrize("cfg", [(2, 1, 3), (2, 2, 4)], ids=["chain", "tree"])
def test_sampling_preserves_the_target_distribution(cfg):
    target, drafter = make_pair(VOCAB, sharpness=1.5, noise=1.0, draft_ids=[0, 1, 3, 4], seed=2)
    dec = SpeculativeDecoder(target, drafter, resolve_spec_flags(*cfg))
    lengths = [c.accept_length for s in range(50) for c in _run(dec, PROMPT, max_new_tokens=20, temperature=T, seed=s)[1]
               if c.accept_length is not None]
    assert sum(lengths) / len(lengths) > 1.4  # drafts are accepted, so the test covers the acceptance rule
    samples = _samples(dec, 2500)
    assert chi_square_p(samples, _exact_three(target.table)) > 1e-3


def test_the_sampling_test_detects_a_biased_rule(monkeypatch):
    """A walk that accepts the first child outright (ignoring p) must fail the same test."""
    def biased(tree, probs, gen):
        children = tree.children()[0]
        if not children:
            return Walk([0], [int(torch.multinomial(probs[0], 1, generator=gen))])
        return Walk([0, children[0]], [int(tree.tokens[children[0]]), int(torch.multinomial(probs[children[0]], 1, generator=gen))])
    monkeypatch.setattr(verify_mod, "tree_sampling_walk", biased)
    target, drafter = make_pair(VOCAB, sharpness=1.5, noise=1.0, draft_ids=[0, 1, 3, 4], seed=2)
    samples = _samples(SpeculativeDecoder(target, drafter, resolve_spec_flags(2, 2, 4)), 2500)
    assert chi_square_p(samples, _exact_three(target.table)) < 1e-6


def test_a_draft_wider_than_a_graph_bucket_runs_eagerly():
    """A drafter whose steps run as CUDA graphs drafts through one graph of the whole draft only when
    every pass fits a bucket (64 nodes): topk 8 over 10 steps re-runs 72 nodes at its last pass, so it
    drafts as the eager decoder does (no graph is made: on this CPU making one would raise)."""
    target, drafter = make_pair(8)
    drafter.graphs = True
    dec = SpeculativeDecoder(target, drafter, resolve_spec_flags(10, 8, 16))
    out, commits = _run(dec, [3, 1], max_new_tokens=20)
    assert dec._draft_graphs is None
    assert out == greedy_reference(target.table, [3, 1], 20)
    assert max(c.accept_length or 0 for c in commits) > 1
