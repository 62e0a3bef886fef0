"""On CUDA the batched decoder's steps replay as CUDA graphs (models.graphs): decoding with them gives
the batch-1 decoder's tokens and accept lengths, call after call. Skipped without a GPU (CI has none);
run on the device machine."""

from __future__ import annotations

import gc

import pytest
import torch

from draftlab.decode.batch_decoder import BatchSpeculativeDecoder
from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.models.pair import load_pair

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")

PROMPTS = [b"def __init__(self", b"import os\nimport sys\n", b"    return self._", b"for i in range(len("]


@pytest.mark.parametrize("config", [(3, 1, 4), (4, 4, 8), None], ids=str)
def test_graphed_batch_equals_one_at_a_time(toy_pair, config):
    pair = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, device="cuda", cache="dynamic")
    flags = exact_spec_flags(*config) if config else None
    drafter = pair.drafter if flags else None
    single = SpeculativeDecoder(pair.target, drafter, flags)
    expected = []
    for prompt in PROMPTS:
        commits = list(single.stream(list(prompt), max_new_tokens=40))
        expected.append(([t for c in commits for t in c.tokens],
                         [c.accept_length for c in commits if c.accept_length is not None]))
    decoder = BatchSpeculativeDecoder(pair.target, drafter, flags)
    for _ in range(2):  # the second call replays the first call's graphs
        rows = decoder.generate([list(p) for p in PROMPTS], max_new_tokens=40)
        assert [(r.output_ids, r.accept_lengths) for r in rows] == expected
    target, batch_drafter = decoder.caches(len(PROMPTS), 1)
    assert len(target._run_bucket) > 0 and (batch_drafter is None or len(batch_drafter._run_bucket) > 0)
    if flags:  # the pair accepts, different lengths per row: the graphs ran over padded, packed caches
        lengths = [n for _, ls in expected for n in ls]
        assert sum(lengths) / len(lengths) > 1.5 and len(set(lengths)) > 1


def test_captures_survive_the_cycle_collector(toy_pair):
    """Decoders dropped inside garbage cycles, with the collector forced to run at nearly every
    allocation: freeing their graphs while another decoder captures would invalidate that capture
    (the profiler builds and drops batched caches this way, one per measured size)."""
    pair = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, device="cuda", cache="dynamic")
    flags = exact_spec_flags(3, 1, 4)
    single = SpeculativeDecoder(pair.target, pair.drafter, flags)
    expected = []
    for prompt in PROMPTS[:3]:
        commits = list(single.stream(list(prompt), max_new_tokens=24))
        expected.append(([t for c in commits for t in c.tokens], [c.accept_length for c in commits[1:]]))
    assert len({n for _, lengths in expected for n in lengths}) > 1  # rows accept different lengths
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        for batch in (2, 3, 2, 3):
            decoder = BatchSpeculativeDecoder(pair.target, pair.drafter, flags)
            rows = decoder.generate([list(p) for p in PROMPTS[:batch]], max_new_tokens=24)
            assert [(r.output_ids, r.accept_lengths) for r in rows] == expected[:batch]
            cycle: list[object] = [decoder]
            cycle.append(cycle)
            del decoder, cycle
    finally:
        gc.set_threshold(*threshold)
