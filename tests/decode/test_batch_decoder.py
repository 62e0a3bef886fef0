"""The batched decoder against the batch-1 decoder on the trained toy pair (fp32, cpu): same tokens,
same accept lengths per prompt, with prompts of different lengths in one batch."""

from __future__ import annotations

import json

import pytest
import torch

from draftlab.decode.batch_decoder import BatchSpeculativeDecoder
from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.decode.generate import generate
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.models.batch_slots import BatchSlots, gather_slots
from draftlab.models.pair import load_pair

PROMPTS = [b"def __init__(self", b"import os\nimport sys\n", b"    return self._", b"for i in range(len(", b"x"]
NEW = 36


@pytest.fixture(scope="module")
def pair(toy_pair):
    return load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="dynamic")


def _one_at_a_time(pair, flags, max_new_tokens=NEW):
    decoder = SpeculativeDecoder(pair.target, pair.drafter if flags else None, flags)
    out = []
    for prompt in PROMPTS:
        tokens, lengths = [], []
        for commit in decoder.stream(list(prompt), max_new_tokens=max_new_tokens):
            tokens += commit.tokens
            if commit.accept_length is not None:
                lengths.append(commit.accept_length)
        out.append((tokens, lengths))
    return out


@pytest.mark.parametrize("config", [(3, 1, 4), (2, 2, 4), (4, 4, 8), None], ids=str)
def test_batch_equals_one_at_a_time(pair, config):
    flags = exact_spec_flags(*config) if config else None
    expected = _one_at_a_time(pair, flags)
    rows = BatchSpeculativeDecoder(pair.target, pair.drafter if flags else None, flags).generate(
        [list(p) for p in PROMPTS], max_new_tokens=NEW)
    assert [(r.output_ids, r.accept_lengths) for r in rows] == expected
    if flags:  # the pair accepts: a batch of rows that accept different lengths was exercised
        lengths = [n for _, ls in expected for n in ls]
        assert sum(lengths) / len(lengths) > 2 and len(set(lengths)) > 1


def test_a_decoder_reuses_its_caches_and_nothing_leaks_between_calls(pair):
    """The second call of a decoder runs on the first call's caches (stale entries and all) and gives
    what the batch-1 decoder gives; a call that needs more slots or another batch size gets new ones."""
    flags = exact_spec_flags(4, 4, 8)
    expected = _one_at_a_time(pair, flags)
    decoder = BatchSpeculativeDecoder(pair.target, pair.drafter, flags)
    decoder.generate([list(p) for p in PROMPTS[1:3]], max_new_tokens=NEW)  # the longer prompts first
    held = decoder.caches(2, 1)
    rows = decoder.generate([list(p) for p in PROMPTS[3:]], max_new_tokens=NEW)
    assert decoder.caches(2, 1) == held
    assert [(r.output_ids, r.accept_lengths) for r in rows] == expected[3:]
    assert decoder.caches(2, held[0].capacity + 1)[0] is not held[0]
    assert decoder.caches(3, 1)[0].batch_size == 3


def test_rows_finish_at_their_own_end(pair, monkeypatch):
    """A row that meets EOS stops there and rides along; the other row decodes on to max_new_tokens,
    and both equal the batch-1 decoder's."""
    flags = exact_spec_flags(3, 1, 4)
    prompts = [list(PROMPTS[3]), list(PROMPTS[2])]  # two rows whose texts differ (others turn to "____")
    free = _one_at_a_time(pair, flags, max_new_tokens=24)
    row0, row1 = free[3][0], free[2][0]
    end = next(i for i, t in enumerate(row0) if i >= 4 and t not in row0[:i] and t not in row1)
    eos = row0[end]  # a token only row 0 produces, first at position `end`
    monkeypatch.setattr(pair.target, "eos_token_ids", [eos])
    rows = BatchSpeculativeDecoder(pair.target, pair.drafter, flags).generate(prompts, max_new_tokens=24)
    expected = _one_at_a_time(pair, flags, max_new_tokens=24)
    assert [(r.output_ids, r.accept_lengths) for r in rows] == [expected[3], expected[2]]
    assert rows[0].output_ids == row0[:end + 1] and len(rows[1].output_ids) == 24
    assert len(rows[0].accept_lengths) < len(rows[1].accept_lengths)


def test_generate_batch_size_matches(pair, toy_pair, tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(p)}) + "\n" for p in PROMPTS))
    args = dict(steps=4, topk=4, num_draft_tokens=8, max_new_tokens=24)
    one = generate(toy_pair.target_dir, toy_pair.drafter_dir, path, **args)
    three = generate(toy_pair.target_dir, toy_pair.drafter_dir, path, batch_size=3, **args)  # groups of 3 and 2
    assert three.config["batch_size"] == 3
    cycles = [r.num_cycles for r in one.results]  # the same per prompt at any batch size
    busy = sum(cycles) / (3 * max(cycles[:3]) + 2 * max(cycles[3:]))
    assert one.row_busy_fraction == 1.0 and three.row_busy_fraction == pytest.approx(busy) and busy < 1
    assert [(r.output_ids, r.accept_lengths) for r in three.results] == \
        [(r.output_ids, r.accept_lengths) for r in one.results]
    assert three.mean_accept_length == one.mean_accept_length > 1.5


def test_slots_keep_packs_each_rows_path():
    slots = BatchSlots(2, torch.device("cpu"))
    slots.append(torch.tensor([[0, 1], [0, 1]]), torch.tensor([[False, True], [True, True]]))  # row 0 left-padded
    slots.append(torch.tensor([[2, 3, 3], [2, 3, 4]]), torch.ones(2, 3, dtype=torch.bool))
    index = slots.keep([[0, 2], [1]])
    assert index.tolist() == [[0, 1, 2, 4], [0, 1, 3, 2]]
    assert slots.valid.tolist() == [[False, True, True, True], [True, True, True, False]]
    assert slots.counts().tolist() == [3, 3]
    keys = torch.arange(2 * 5, dtype=torch.float).view(2, 1, 5, 1)
    assert gather_slots(keys, index)[:, 0, :, 0].tolist() == [[0, 1, 2, 4], [5, 6, 8, 7]]
    # a new entry sees its row's real entries only, and itself
    allowed = slots.allowed(torch.tensor([[3], [3]]), None, torch.ones(2, 1, dtype=torch.bool))
    assert allowed[:, 0].tolist() == [[False, True, True, True, True], [True, True, True, False, True]]
    slots.append(torch.tensor([[3], [3]]), torch.ones(2, 1, dtype=torch.bool))
    assert slots.keep([[], []]) == 4 and slots.length == 4  # a draft pass dropped: crop, no gather


def test_batch_on_a_static_pair(pair, toy_pair):
    """A pair loaded for the batch-1 fast path (static caches) also serves batches, unchanged."""
    static = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="static", max_len=128)
    flags = exact_spec_flags(4, 4, 8)
    prompts = [list(p) for p in PROMPTS[:3]]
    rows = BatchSpeculativeDecoder(static.target, static.drafter, flags).generate(prompts, max_new_tokens=20)
    expected = BatchSpeculativeDecoder(pair.target, pair.drafter, flags).generate(prompts, max_new_tokens=20)
    assert [(r.output_ids, r.accept_lengths) for r in rows] == [(r.output_ids, r.accept_lengths) for r in expected]
    lengths = [n for r in rows for n in r.accept_lengths]
    assert sum(lengths) / len(lengths) > 1.5 and len(set(lengths)) > 1  # the drafter's static cache is exercised
    single = list(SpeculativeDecoder(static.target, static.drafter, flags).stream(prompts[0], max_new_tokens=20))
    assert [t for c in single for t in c.tokens] == rows[0].output_ids
    assert [c.accept_length for c in single[1:]] == rows[0].accept_lengths
