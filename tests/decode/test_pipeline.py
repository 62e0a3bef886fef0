"""Greedy cycles on the device, the host a cycle behind (``DRAFTLAB_CYCLE=pipelined``, decode/pipeline.py):
the walk on the device is the host's walk, and on the trained toy pair the pipelined decoder commits the
host-walk decoder's tokens and accept lengths, chains and trees, where decoding ends by max_new_tokens,
by an EOS and by the context, in caches sized exactly as generate sizes them."""

from __future__ import annotations

import pytest
import torch

from draftlab.decode import pipeline
from draftlab.decode.decoder import SpeculativeDecoder, max_cache_len
from draftlab.decode.tree import build_tree
from draftlab.decode.verify import greedy_walk
from draftlab.engines.sglang_flags import resolve_spec_flags
from draftlab.models import kernels
from draftlab.models.pair import load_pair

PROMPTS = [list(t.encode()) for t in ("def __init__(self, ", "import os\nimport sys\n\n", "    for i in range(len(")]
CONFIGS = [(3, 1, 4), (4, 4, 8), (5, 1, 4)]


def test_the_device_walk_is_the_host_walk_on_random_trees() -> None:
    """Random trees (chains, bushes, orphans) and argmaxes planted to follow them to every depth."""
    gen = torch.Generator().manual_seed(0)
    depths = set()
    for trial in range(300):
        n = int(torch.randint(2, 12, (1,), generator=gen))
        parents = torch.tensor([int(torch.randint(-1 if i else 0, i + 1, (1,), generator=gen)) for i in range(n - 1)])
        tokens = torch.randint(0, 6, (n - 1,), generator=gen)
        tree = build_tree(7, tokens, parents)
        argmax = torch.randint(0, 6, (n,), generator=gen)
        node = 0
        while trial % 3:  # plant a path: each step follows a random child
            kids = (tree.parents == node).nonzero().flatten().tolist()
            if not kids or torch.rand(1, generator=gen) < 0.2:
                break
            child = kids[int(torch.randint(0, len(kids), (1,), generator=gen))]
            argmax[node] = tree.tokens[child]
            node = child
        steps = int(tree.depth.max())
        want = greedy_walk(tree, torch.nn.functional.one_hot(argmax, 6).float())
        path, count = pipeline.device_walk(tree, argmax, steps)
        assert path.shape == (steps + 1,) and int(count) == len(want.nodes)
        assert path[:len(want.nodes)].tolist() == want.nodes and argmax[path][:int(count)].tolist() == want.tokens
        depths.add(len(want.nodes))
    assert depths >= {1, 2, 3, 4}


class Switch:
    """``on()`` sets DRAFTLAB_CYCLE=pipelined for the decoders made after it; ``queued`` counts the cycles
    the pipeline queued with as many unread before them."""

    def __init__(self, monkeypatch) -> None:
        self.monkeypatch, self.queued = monkeypatch, []
        original = pipeline.PipelinedCycles._queue

        def counting(cycles, ahead):
            self.queued.append(ahead)
            return original(cycles, ahead)

        monkeypatch.setattr(pipeline.PipelinedCycles, "_queue", counting)

    def on(self) -> None:
        self.monkeypatch.setenv(kernels.CYCLE_ENV, "pipelined")
        kernels.pipelined_chosen.cache_clear()


@pytest.fixture
def switch(monkeypatch):
    kernels.pipelined_chosen.cache_clear()
    yield Switch(monkeypatch)
    kernels.pipelined_chosen.cache_clear()


def _decode(decoder: SpeculativeDecoder, prompts: list[list[int]], new: int, ignore_eos: bool = True):
    out = []
    for prompt in prompts:
        commits = list(decoder.stream(prompt, max_new_tokens=new, ignore_eos=ignore_eos))
        out.append(([t for c in commits for t in c.tokens], [c.accept_length for c in commits]))
    return out


@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(map(str, c)) for c in CONFIGS])
def test_pipelined_cycles_commit_the_host_walks_tokens(toy_pair, switch, cfg) -> None:
    flags = resolve_spec_flags(*cfg)
    new = 37  # not a multiple of any cycle: the last commit is cut
    pair = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="static",
                     max_len=max_cache_len(max(map(len, PROMPTS)), new, flags))
    host = SpeculativeDecoder(pair.target, pair.drafter, flags)
    assert not host._pipelined
    want = _decode(host, PROMPTS, new)
    switch.on()
    fast = SpeculativeDecoder(pair.target, pair.drafter, flags)
    assert fast._pipelined
    assert _decode(fast, PROMPTS, new) == want
    lengths = [n for _, row in want for n in row[1:]]
    assert sum(lengths) / len(lengths) > 1.5 and len(set(lengths)) > 1  # acceptance is real and varies
    assert 1 in switch.queued  # cycles were queued a cycle ahead of the host
    assert all(len(tokens) == new for tokens, _ in want)


def test_pipelined_cycles_stop_at_an_eos_and_at_the_context(toy_pair, switch) -> None:
    """An EOS ends the sequence where the host-walk decoder ends it, the cycle queued behind it dropped
    (here "s" and "." are the EOS: the toy target writes them a few tokens in, inside a cycle);
    a prompt near the context's end stops where the next verify would pass it."""
    flags = resolve_spec_flags(3, 1, 4)
    long_prompt = (list(b"import os\n") * 300)[:2048 - 30]
    pair = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="static",
                     max_len=max_cache_len(len(long_prompt), 64, flags))
    pair.target.eos_token_ids = {ord("s"), ord(".")}
    host = SpeculativeDecoder(pair.target, pair.drafter, flags)
    want_eos = _decode(host, PROMPTS, 200, ignore_eos=False)
    want_context = _decode(host, [long_prompt], 64)
    switch.on()
    fast = SpeculativeDecoder(pair.target, pair.drafter, flags)
    assert _decode(fast, PROMPTS, 200, ignore_eos=False) == want_eos
    assert _decode(fast, [long_prompt], 64) == want_context
    ended = [tokens for tokens, _ in want_eos if tokens[-1] in pair.target.eos_token_ids]
    assert len(ended) >= 2 and all(len(tokens) < 200 for tokens in ended)
    assert len(long_prompt) + len(want_context[0][0]) <= 2048 and len(want_context[0][0]) < 64


SYNCING = {"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::unique_consecutive",
           "aten::lift_fresh",  # torch.tensor(data): on a GPU, a copy from pageable memory, which waits
           "aten::_unique2", "aten::repeat_interleave"}


def test_a_cycle_is_queued_without_reading_the_device(toy_pair, switch) -> None:
    """Nothing a queued cycle runs makes the host wait for the device on a GPU: no operator that reads a
    value back (``item``, as indexing by a 0-d tensor does), sizes its output by the data (``nonzero``) or
    uploads host data (``torch.tensor``); the only read is the committed tokens' copy, behind its event,
    when the host asks for them."""
    from torch.profiler import ProfilerActivity, profile

    flags = resolve_spec_flags(4, 4, 8)
    pair = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="static",
                     max_len=max_cache_len(max(map(len, PROMPTS)), 40, flags))
    switch.on()
    decoder = SpeculativeDecoder(pair.target, pair.drafter, flags)
    recorded, original = [], pipeline.PipelinedCycles._queue

    def watched(cycles, ahead):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            queued = original(cycles, ahead)
        recorded.append({event.name for event in prof.events()})
        return queued

    switch.monkeypatch.setattr(pipeline.PipelinedCycles, "_queue", watched)
    commits = list(decoder.stream(PROMPTS[0], max_new_tokens=40, ignore_eos=True))
    assert len(recorded) >= len(commits) - 1 >= 5
    assert all("aten::argmax" in seen and not seen & SYNCING for seen in recorded)
