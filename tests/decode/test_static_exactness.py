"""Greedy exactness with static caches on the trained toy pair.

The target's static KV cache (CUDA graphs off: CPU) plus the drafter's static cache must give exactly
the tokens and accept lengths of the dynamic caches, and the target's own greedy text; one loaded
static pair must serve decoding and the probe's batched pass in turn.
"""

import json

import pytest
import torch

from draftlab.decode.decoder import SpeculativeDecoder, max_cache_len
from draftlab.decode.generate import generate
from draftlab.engines.sglang_flags import SpecFlags, resolve_spec_flags
from draftlab.errors import DraftlabError
from draftlab.models.pair import LoadedPair, load_pair
from draftlab.probe.probe import probe_sequences

TEXTS = ["def __init__(self, ", "import os\nimport sys\n\n", "    for i in range(len("]
PROMPTS = [list(t.encode()) for t in TEXTS]
CONFIGS = [(3, 1, 4), (4, 4, 8)]
NEW = 40


def _flags(cfg: tuple[int, int, int]) -> SpecFlags:
    return resolve_spec_flags(*cfg)


def _decode(pair: LoadedPair, flags: SpecFlags | None, new: int = NEW, *,
            ignore_eos: bool = True) -> tuple[list[list[int]], list[list[int]]]:
    """Tokens and per-cycle accept lengths of each prompt."""
    decoder = SpeculativeDecoder(pair.target, pair.drafter if flags else None, flags)
    tokens, lengths = [], []
    for prompt in PROMPTS:
        commits = list(decoder.stream(prompt, max_new_tokens=new, ignore_eos=ignore_eos))
        tokens.append([t for c in commits for t in c.tokens])
        lengths.append([c.accept_length for c in commits if c.accept_length is not None])
    return tokens, lengths


@pytest.fixture(scope="module")
def dynamic(toy_pair) -> LoadedPair:
    return load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="dynamic")


@pytest.fixture(scope="module")
def static(toy_pair) -> LoadedPair:
    """Both caches sized exactly as generate sizes them for the widest config: decoding must fit."""
    longest = max(len(p) for p in PROMPTS)
    max_len = max(max_cache_len(longest, NEW, _flags(cfg)) for cfg in CONFIGS)
    return load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="static", max_len=max_len)


@pytest.fixture(scope="module")
def greedy(dynamic, static) -> list[list[int]]:
    """The target's plain greedy decoding (no drafter), the same with either cache."""
    tokens, _ = _decode(static, None)
    assert tokens == _decode(dynamic, None)[0]
    assert all(len(t) == NEW for t in tokens)
    return tokens


@pytest.mark.parametrize("cfg", CONFIGS, ids=["chain-3-1-4", "tree-4-4-8"])
def test_static_caches_give_the_dynamic_tokens_and_accept_lengths(dynamic, static, greedy, cfg):
    assert static.target.cache == "static" and dynamic.target.cache == "dynamic"
    flags = _flags(cfg)
    tokens, lengths = _decode(static, flags)
    ref_tokens, ref_lengths = _decode(dynamic, flags)
    assert lengths == ref_lengths
    assert tokens == ref_tokens == greedy
    flat = [a for row in lengths for a in row]
    assert sum(flat) / len(flat) > 1.5 and len(set(flat)) > 1  # acceptance is real and varies


@pytest.mark.parametrize("cfg", CONFIGS)
def test_the_draft_as_its_cuda_graph_runs_it_builds_the_eager_trees(static, greedy, cfg):
    """On CUDA a static drafter drafts through one graph of the whole draft, which takes the cache
    length and each pass's read slots as tensors and runs the drafter's passes as ``tree_pass``. That
    function, run here without the graph at every cycle of a decode, must compute the eager draft's
    passes and tree bit for bit, and leave the decode (whose passes overwrite the same slots) as it was."""
    flags = _flags(cfg)
    drafter = static.drafter
    decoder = SpeculativeDecoder(static.target, drafter, flags)
    eager, compared, passes = decoder._draft, [], []

    def recorded(fn):
        def run(*args, **kwargs):
            out = fn(*args, **kwargs)
            passes.append(out.logits)
            return out
        return run

    def both(root, state):
        passes.clear()
        drafter.forward = recorded(type(drafter).forward.__get__(drafter))
        tree = eager(root, state)
        del drafter.forward
        eager_passes = list(passes)
        passes.clear()
        cached = drafter.cache_len
        reads = [drafter.tree_reads(cached, flags.topk * step) for step in range(1, flags.steps)]
        drafter.tree_pass = recorded(type(drafter).tree_pass.__get__(drafter))
        got = decoder._draft_captured(torch.tensor([root]), state.logits, state.hidden, torch.tensor([cached]), *reads)
        del drafter.tree_pass
        same_tree = all(torch.equal(a, b) for a, b in zip((tree.tokens, tree.parents, tree.depth, tree.mask), got))
        compared.append(same_tree and len(passes) == flags.steps - 1
                        and all(torch.equal(a, b) for a, b in zip(eager_passes, passes)))
        return tree

    decoder._draft = both
    commits = list(decoder.stream(PROMPTS[0], max_new_tokens=NEW, ignore_eos=True))
    assert [t for c in commits for t in c.tokens] == greedy[0]
    assert max(c.accept_length or 0 for c in commits) > 1  # drafts were accepted: the trees mattered
    assert len(compared) >= 5 and all(compared)


def test_one_static_pair_serves_the_probe_and_decoding_in_turn(static):
    """The probe's batched pass runs on the static-mode target, and decoding afterwards is unchanged."""
    flags = _flags((3, 1, 4))
    ref_tokens, ref_lengths = _decode(static, flags, ignore_eos=False)
    ahead, _ = _decode(static, flags, NEW + flags.steps + 1, ignore_eos=False)  # the walk's look-ahead
    got = probe_sequences(static.target, static.drafter, PROMPTS, ahead, flags, max_new_tokens=NEW, batch_size=2)
    assert [r.accept_lengths for r in got.results] == ref_lengths
    assert got.target_disagreement == 0.0
    assert _decode(static, flags, ignore_eos=False) == (ref_tokens, ref_lengths)


def test_a_static_target_brings_a_static_drafter_cache_of_the_same_size(toy_pair, dynamic):
    pair = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="static", max_len=8)
    assert pair.target.max_len == 8 and dynamic.target.max_len is None
    hidden = pair.target.forward(pair.target.embed_tokens.weight.new_ones(8).long()).aux
    with pytest.raises(DraftlabError, match="drafter's static KV cache holds 8"):
        pair.drafter.forward(hidden.new_ones(9).long(), hidden[:1].expand(9, -1))


def test_generate_with_static_caches_sizes_them_and_matches_the_dynamic_run(toy_pair, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": p}) + "\n" for p in PROMPTS))
    runs = {cache: generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=4, topk=4, num_draft_tokens=8,
                            max_new_tokens=24, cache=cache) for cache in ("static", "auto")}
    assert runs["static"].config["cache"] == "static" and runs["auto"].config["cache"] == "dynamic"  # CPU: dynamic
    assert [(r.output_ids, r.accept_lengths) for r in runs["static"].results] == \
        [(r.output_ids, r.accept_lengths) for r in runs["auto"].results]
