"""Every command that loads a model, run in the configuration a CUDA device gets by default: the
target loaded for the static runtime (preallocated caches, draftlab's attention over them; CUDA graphs
are the one part only CUDA has). On the CPU, cache "auto" means dynamic, so without this module the
suite would never see the path users take (probe's continuations once called the model's own forward
on a static-mode target and crashed on every GPU)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from draftlab.cli import main
from draftlab.decode.generate import generate
from draftlab.models import target as target_module

sys.path.insert(0, str(Path(__file__).parent / "serve"))

TEXTS = ["def __init__(self, ", "import os\nimport sys\n\n", "    for i in range(len("]
NEW = 24


@pytest.fixture
def static_runtime(monkeypatch):
    """Cache "auto" loads every target on the CPU as it would on one CUDA device: static."""
    monkeypatch.setattr(target_module, "STATIC_BY_DEFAULT", ("cuda", "cpu"))


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("static") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in TEXTS))
    return path


@pytest.fixture(scope="module")
def reference(toy_pair, prompts):
    """generate on the default (dynamic) runtime: what every static-runtime command must reproduce."""
    return {cfg: generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=cfg[0], topk=cfg[1],
                          num_draft_tokens=cfg[2], max_new_tokens=NEW)
            for cfg in [(3, 1, 4), (4, 4, 8)]}


def _flags(cfg):
    return ["--steps", str(cfg[0]), "--topk", str(cfg[1]), "--num-draft-tokens", str(cfg[2])]


def test_fixture_loads_static(toy_pair, static_runtime):
    from draftlab.models.target import TargetRunner

    assert TargetRunner.load(toy_pair.target_dir).cache == "static"


@pytest.mark.parametrize("cfg", [(3, 1, 4), (4, 4, 8)])
def test_probe_cli_equals_generate(toy_pair, prompts, reference, static_runtime, capsys, cfg):
    code = main(["probe", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                 "--prompts", str(prompts), *_flags(cfg), "--max-new-tokens", str(NEW), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    ref = reference[cfg]
    assert [r["accept_lengths"] for r in doc["results"]] == [r.accept_lengths for r in ref.results]
    assert 1.5 < ref.mean_accept_length and doc["target_disagreement"] == 0.0
    assert set(doc["timings"]) == {"load_s", "continuations_s", "probe_s", "total_s"}


def test_static_generate_equals_dynamic(toy_pair, prompts, reference, static_runtime):
    got = generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=4, topk=4, num_draft_tokens=8,
                   max_new_tokens=NEW)
    assert got.config["cache"] == "static"
    assert [r.output_ids for r in got.results] == [r.output_ids for r in reference[(4, 4, 8)].results]
    assert [r.accept_lengths for r in got.results] == [r.accept_lengths for r in reference[(4, 4, 8)].results]


def test_plan_probe_equals_generate(toy_pair, prompts, reference, static_runtime, capsys):
    code = main(["plan", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                 "--prompts", str(prompts), "--grid", "3/1/4,4/4/8", "--max-new-tokens", str(NEW),
                 "--context", "32", "--repeats", "1", "--device", "cpu", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    got = {(c["steps"], c["topk"], c["num_draft_tokens"]): c["accept_length"] for c in doc["configs"]}
    for cfg, ref in reference.items():
        assert got[cfg] == ref.mean_accept_length


def test_drift_against_itself_and_its_accept_length(toy_pair, prompts, reference, static_runtime, capsys):
    code = main(["drift", "--target-a", str(toy_pair.target_dir), "--target-b", str(toy_pair.target_dir),
                 "--prompts", str(prompts), "--drafter", str(toy_pair.drafter_dir), *_flags((3, 1, 4)),
                 "--max-new-tokens", str(NEW), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(math.isclose(m["cosine"], 1.0, abs_tol=1e-6) and m["relative_l2"] == 0.0 for m in doc["layers"])
    assert doc["next_token_agreement"] == 1.0
    assert doc["accept_length_a"] == doc["accept_length_b"] == reference[(3, 1, 4)].mean_accept_length


def test_serve_bench_equals_generate(toy_pair, reference, static_runtime):
    from pair_server import start

    from draftlab.bench.client import BenchConfig
    from draftlab.bench.run import run_bench
    from draftlab.bench.workload import Prompt
    from draftlab.serve.load import load_context

    ctx = load_context(toy_pair.target_dir, toy_pair.drafter_dir, steps=3, topk=1, num_draft_tokens=4)
    assert ctx.engine.decoder.target.cache == "static"
    server, url = start(ctx)
    try:
        config = BenchConfig(base_url=url, api="sglang", max_tokens=NEW, warmup=0, concurrency=2, temperature=0.0)
        result = run_bench(config, [Prompt(input_ids=list(t.encode())) for t in TEXTS])
    finally:
        server.shutdown()
        ctx.engine.close()
    assert result.completed == len(TEXTS) and result.failed == 0
    assert result.accept_length == pytest.approx(reference[(3, 1, 4)].mean_accept_length, rel=1e-12)
