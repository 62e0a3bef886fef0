"""`draftlab serve` on the trained toy pair, benched, against `draftlab generate` on the same prompts."""

from __future__ import annotations

import json

import pytest
from pair_server import start

from draftlab.bench.client import BenchConfig
from draftlab.bench.run import run_bench
from draftlab.bench.workload import Prompt
from draftlab.decode.generate import generate
from draftlab.serve.load import load_context

TEXTS = ["def __init__(self, name", "import os\nimport sys\n\n", "    for key, value in self.", "return self._"]


@pytest.mark.parametrize("flags", [(3, 1, 4), (4, 4, 8)])
def test_bench_accept_length_equals_generate(toy_pair, tmp_path, flags):
    prompt_ids = [list(t.encode()) for t in TEXTS]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": ids}) + "\n" for ids in prompt_ids))
    steps, topk, ndt = flags
    expected = generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=steps, topk=topk,
                        num_draft_tokens=ndt, max_new_tokens=32)
    assert expected.mean_accept_length > 1.5  # the toy pair accepts for real

    ctx = load_context(toy_pair.target_dir, toy_pair.drafter_dir, steps=steps, topk=topk, num_draft_tokens=ndt)
    server, url = start(ctx)
    try:
        config = BenchConfig(base_url=url, api="sglang", max_tokens=32, warmup=1, concurrency=2, temperature=0.0)
        result = run_bench(config, [Prompt(input_ids=ids) for ids in prompt_ids])
    finally:
        server.shutdown()
        ctx.engine.close()
    assert result.completed == len(TEXTS) and result.failed == 0
    assert result.accept_length == pytest.approx(expected.mean_accept_length, rel=1e-12)
