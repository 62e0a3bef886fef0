"""``draftlab serve --schedule``: requests are batched and each batch drafts as many tokens as the
schedule gives its size (0: plain decoding); greedy output stays that of plain decoding."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from pair_server import start

from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.engines.schedule import load_schedule
from draftlab.models.pair import load_pair
from draftlab.serve.batched import BatchServeEngine
from draftlab.serve.engine import Job
from draftlab.serve.load import load_context

PROMPTS = [list(b"def __init__(self"), list(b"import os\nimport sys\n"), list(b"    return self._"),
           list(b"for i in range(len("), list(b"x")]
NEW = 24
# vLLM's format: batch 1 drafts 4, batch 2 drafts 2, batches of 3 and more do not speculate
SCHEDULE = {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 2, 2], [3, 8, 0]]}


@pytest.fixture(scope="module")
def pair(toy_pair):
    return load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="dynamic")


@pytest.fixture(scope="module")
def plain(pair):
    """Each prompt's greedy continuation without speculation."""
    decoder = SpeculativeDecoder(pair.target, None, None)
    return [[t for c in decoder.stream(p, max_new_tokens=NEW, ignore_eos=True) for t in c.tokens] for p in PROMPTS]


def _run_batch(engine: BatchServeEngine, prompts: list[list[int]]) -> list[tuple[list[int], list[int | None]]]:
    streams = [engine.submit(Job(p, NEW, 0.0, True, None)) for p in prompts]  # queued together: one batch
    out = []
    for s in streams:
        commits = list(s)
        out.append(([t for c in commits for t in c.tokens], [c.accept_length for c in commits[1:]]))
    return out


def test_drafted_tokens_follow_the_batch_size(tmp_path, pair, plain):
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(SCHEDULE))
    schedule = load_schedule(path)
    engine = BatchServeEngine(pair.target, pair.drafter, schedule.draft_length, max_draft_length=4, max_batch=8,
                              gather_s=0.5)
    try:
        drafted = []
        for size, prompts in ((1, PROMPTS[:1]), (2, PROMPTS[1:3]), (3, PROMPTS[2:5])):
            before = engine.snapshot()
            results = _run_batch(engine, prompts)
            after = engine.snapshot()
            cycles = after.num_drafts - before.num_drafts
            drafted.append((after.num_draft_tokens - before.num_draft_tokens) / cycles)
            start = PROMPTS.index(prompts[0])
            assert [tokens for tokens, _ in results] == plain[start:start + size]  # greedy: plain decoding's tokens
            lengths = [n for _, ls in results for n in ls]
            assert max(lengths) <= schedule.draft_length(size) + 1
            if size < 3:
                assert sum(lengths) / len(lengths) > 1.5  # the drafter's tokens were accepted
            else:
                assert set(lengths) == {1}  # plain decoding: one token per step
        assert drafted == [4, 2, 0]
        assert engine.batch_sizes == {1: 1, 2: 1, 3: 1}
    finally:
        engine.close()


def test_http_server_batches_concurrent_requests(toy_pair, tmp_path, plain):
    """Through HTTP: 3 concurrent requests run as one batch with no drafting, 1 request drafts 4."""
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(SCHEDULE))
    ctx = load_context(toy_pair.target_dir, toy_pair.drafter_dir, schedule=load_schedule(path), max_batch=3)
    ctx.engine.gather_s = 0.5
    server, url = start(ctx)

    def generate(ids):
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": NEW, "temperature": 0, "ignore_eos": True}}
        return httpx.post(url + "/generate", json=body, timeout=60, trust_env=False).json()

    try:
        one = generate(PROMPTS[0])
        assert one["output_ids"] == plain[0] and one["meta_info"]["spec_accept_length"] > 1.5
        with ThreadPoolExecutor(3) as pool:
            three = list(pool.map(generate, PROMPTS[:3]))
        assert [r["output_ids"] for r in three] == plain[:3]
        # one token per step: SGLang's meta counts each plain step as a verify with no correct draft
        assert all(r["meta_info"]["spec_verify_ct"] == NEW - 1 and r["meta_info"]["spec_num_correct_drafts"] == 0
                   for r in three)
        assert ctx.engine.batch_sizes == {1: 1, 3: 1}
        assert ctx.spec == {"num_steps": 4, "eagle_topk": 1, "num_draft_tokens": 5}
    finally:
        server.shutdown()
        ctx.engine.close()
