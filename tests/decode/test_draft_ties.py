"""topk 1 under exact logit ties: both decoders draft the first maximum, as SGLang's ``argmax`` does.

The drafter's lm_head is all zeros, so every draft step ties over its whole 40-token vocabulary;
SGLang drafts draft id 0 every time, which maps to T0, a token the tiny target's greedy output
repeats. The accept lengths then follow from the greedy text alone: a cycle accepts the run of T0
after its root, up to ``steps``. (softmax(...).topk(1) picks a later index on the CPU for rows
shorter than 64 and never drafts T0.) A synthetic pair whose drafter logits tie among a few top
tokens checks the first maximum itself, against SGLang's chain computed from its tables.
"""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from spec_fakes import greedy_reference, make_pair  # noqa: E402
from tiny_drafters import drafter_tensors, tied_head, write_specforge  # noqa: E402
from tiny_targets import tiny_target  # noqa: E402

import draftlab.decode.decoder as decoder_mod  # noqa: E402
import draftlab.decode.verify as verify_mod  # noqa: E402
from draftlab.decode.batch_decoder import BatchSpeculativeDecoder  # noqa: E402
from draftlab.decode.decoder import SpeculativeDecoder  # noqa: E402
from draftlab.engines.sglang_flags import resolve_spec_flags  # noqa: E402
from draftlab.models.drafter import Eagle3Drafter  # noqa: E402
from draftlab.models.target import TargetRunner  # noqa: E402

T0 = 64  # the tiny llama target's greedy output after [1, 2, 3] starts 64 64 64 4 and has a run of 15 64s
PROMPTS = [[1, 2, 3], [5], [7, 7, 0, 1]]
NEW = 30


@pytest.fixture(scope="module")
def tied_pair(tmp_path_factory):
    runner = TargetRunner(tiny_target("llama"), aux_layers=[0, 2, 3])
    tensors = tied_head(drafter_tensors(with_embed=False, seed=3), T0)
    folder = write_specforge(tmp_path_factory.mktemp("d") / "tied", tensors)
    return runner, Eagle3Drafter.load(folder, target=runner)


def _greedy(runner, prompt, n):
    return [t for c in SpeculativeDecoder(runner, None, None).stream(prompt, max_new_tokens=n, ignore_eos=True)
            for t in c.tokens]


def _expected_accept_lengths(text: list[int], steps: int, max_new_tokens: int) -> list[int]:
    """Per cycle: 1 + the run of T0 right after the root, at most ``steps`` (``text`` runs past the end)."""
    lengths, produced = [], 1
    while produced < max_new_tokens:
        run = 0
        while run < steps and text[produced + run] == T0:
            run += 1
        lengths.append(run + 1)
        produced += run + 1
    return lengths


def _decode(kind, runner, drafter, flags, **kw):
    """(output_ids, accept_lengths) per prompt from the batch-1 or the batched decoder."""
    if kind == "batched":
        rows = BatchSpeculativeDecoder(runner, drafter, flags).generate(PROMPTS, ignore_eos=True, **kw)
        return [(r.output_ids, r.accept_lengths) for r in rows]
    out = []
    for prompt in PROMPTS:
        commits = list(SpeculativeDecoder(runner, drafter, flags).stream(prompt, ignore_eos=True, **kw))
        out.append(([t for c in commits for t in c.tokens], [c.accept_length for c in commits[1:]]))
    return out


@pytest.mark.parametrize("kind", ["batch-1", "batched"])
@pytest.mark.parametrize("steps", [1, 3, 5])
def test_decoders_draft_the_first_maximum_of_tied_logits(tied_pair, kind, steps):
    runner, drafter = tied_pair
    texts = [_greedy(runner, p, NEW + steps + 1) for p in PROMPTS]
    expected = [(t[:NEW], _expected_accept_lengths(t, steps, NEW)) for t in texts]
    assert max(n for _, e in expected for n in e) == steps + 1  # full chains are accepted: a real test
    assert _decode(kind, runner, drafter, resolve_spec_flags(steps, 1, steps + 1), max_new_tokens=NEW) == expected


@pytest.mark.parametrize("module", [decoder_mod, verify_mod], ids=["batch-1", "batched"])
def test_sampled_decoding_drafts_the_first_maximum_too(tied_pair, monkeypatch, module):
    """At temperature > 0 the drafts are still SGLang's argmax: every tree the decoder verifies is T0s.
    (The batched decoder's walks call verify's own ``walk_tree``, row by row.)"""
    runner, drafter = tied_pair
    drafted = []

    def recording(tree, logits, temperature, gen, walk=module.walk_tree):
        drafted.extend(tree.tokens[1:].tolist())
        return walk(tree, logits, temperature, gen)

    monkeypatch.setattr(module, "walk_tree", recording)
    _decode("batched" if module is verify_mod else "batch-1", runner, drafter, resolve_spec_flags(3, 1, 4),
            max_new_tokens=12, temperature=0.8, seed=1)
    assert drafted and set(drafted) == {T0}


def _first_max(row: torch.Tensor) -> int:
    return int((row == row.max()).nonzero()[0])


def test_batch_one_decoder_drafts_the_first_of_a_few_tied_maxima():
    """Drafter logits rounded to even integers tie among a few top tokens, not all: every cycle accepts
    what SGLang's chain (first maximum at each step, from the tables) accepts along the greedy text."""
    target, drafter = make_pair(12, noise=0.5)
    drafter.table = 2 * torch.round(drafter.table / 2)
    steps, ties = 3, 0
    dec = SpeculativeDecoder(target, drafter, resolve_spec_flags(steps, 1, steps + 1))
    lengths_seen = []
    for prompt in ([1, 2, 3], [5, 0], [7, 7, 0, 1], [4, 6]):
        seq = prompt + greedy_reference(target.table, prompt, NEW + steps + 1)
        expected, produced = [], 1
        while produced < NEW:
            root = len(prompt) + produced - 1
            prev, tok, run = seq[root - 1], seq[root], 0
            while run < steps:
                row = drafter.table[prev, tok][drafter.draft_ids]
                ties += int((row == row.max()).sum()) > 1
                draft = int(drafter.draft_ids[_first_max(row)])
                if draft != seq[root + 1 + run]:
                    break
                prev, tok, run = tok, draft, run + 1
            expected.append(run + 1)
            produced += run + 1
        commits = list(dec.stream(prompt, max_new_tokens=NEW))
        assert [c.accept_length for c in commits[1:]] == expected
        lengths_seen += expected
    assert ties > 5 and max(lengths_seen) == steps + 1  # tied maxima were drafted, and chains accepted
