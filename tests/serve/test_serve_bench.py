"""draftlab serve + draftlab bench end to end, on the real decoder over a tiny synthetic pair."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pair_server import build_context, start

from draftlab.bench.client import BenchConfig
from draftlab.bench.run import run_bench
from draftlab.bench.workload import Prompt
from draftlab.decode.metrics import accept_stats
from draftlab.serve.http import make_server

PROMPTS = [[1, 2, 3], [4, 5], [6, 0, 7, 8], [9], [2, 2, 10], [3, 1]]


@pytest.fixture(scope="module")
def spec_server():
    ctx = build_context(drafted=True)
    server, url = start(ctx)
    yield ctx, url
    server.shutdown()
    ctx.engine.close()


@pytest.fixture(scope="module")
def base_server():
    ctx = build_context(drafted=False)
    server, url = start(ctx)
    yield ctx, url
    server.shutdown()
    ctx.engine.close()


def _generate(url: str, ids: list[int], max_new: int = 40) -> dict:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new, "temperature": 0}}
    return httpx.post(url + "/generate", json=body, timeout=30, trust_env=False).json()


def _direct(ctx, max_new: int = 40):
    """What draftlab generate computes: outputs and accept lengths straight from the decoder."""
    outputs, lengths = [], []
    for ids in PROMPTS:
        out = []
        for commit in ctx.engine.decoder.stream(ids, max_new_tokens=max_new):
            out += commit.tokens
            if commit.accept_length is not None:
                lengths.append(commit.accept_length)
        outputs.append(out)
    return outputs, accept_stats(lengths).mean_accept_length


@pytest.mark.parametrize("api", ["sglang", "openai", "openai-chat"])
def test_bench_accept_length_equals_the_decoders(spec_server, api):
    ctx, url = spec_server
    _, expected = _direct(ctx)
    assert expected > 1.2  # the pair accepts for real, so equality below means something
    prompts = [Prompt(input_ids=p) if api != "openai-chat" else Prompt(text=" ".join(map(str, p))) for p in PROMPTS]
    config = BenchConfig(base_url=url, api=api, max_tokens=40, warmup=2, concurrency=2, temperature=0.0)
    result = run_bench(config, prompts)
    assert result.completed == len(PROMPTS) and result.failed == 0 and result.errors == []
    assert result.accept_length == pytest.approx(expected, rel=1e-12)
    if api != "sglang":  # per-position rates come from the vLLM-named counters
        assert len(result.acceptance_by_position) == 3
        assert result.acceptance_by_position[0] >= result.acceptance_by_position[-1] > 0
    assert result.ttft_ms["p50"] > 0 and result.e2e_ms["p99"] >= result.e2e_ms["p50"]


def test_outputs_identical_with_and_without_drafter(spec_server, base_server):
    (ctx, spec_url), (_, base_url) = spec_server, base_server
    direct, _ = _direct(ctx)
    for ids, expected in zip(PROMPTS, direct):
        spec = _generate(spec_url, ids)
        base = _generate(base_url, ids)
        assert spec["output_ids"] == base["output_ids"] == expected
        meta = spec["meta_info"]
        assert meta["completion_tokens"] == len(expected)
        assert 1 <= meta["spec_verify_ct"] < len(expected)
        assert "spec_verify_ct" not in base["meta_info"]


def _decoder_mean(ctx, prompts: list[list[int]], max_new: int = 40) -> float:
    lengths = [c.accept_length for ids in prompts for c in ctx.engine.decoder.stream(ids, max_new_tokens=max_new)
               if c.accept_length is not None]
    return accept_stats(lengths).mean_accept_length


def test_server_info_is_cumulative_and_bench_is_not(spec_server):
    """/get_server_info averages every request the server ever decoded; bench reports only its own run."""
    ctx, url = spec_server
    earlier, measured = PROMPTS[:2], PROMPTS[2:]
    for ids in earlier:  # traffic before the bench, which the server keeps counting
        _generate(url, ids)
    config = BenchConfig(base_url=url, api="sglang", max_tokens=40, warmup=0, concurrency=1, temperature=0.0)
    result = run_bench(config, [Prompt(input_ids=p) for p in measured])
    info = httpx.get(url + "/get_server_info", trust_env=False).json()
    counters = ctx.engine.snapshot()
    cumulative = info["internal_states"][0]["avg_spec_accept_length"]

    assert result.accept_length == pytest.approx(_decoder_mean(ctx, measured), rel=1e-12)
    assert cumulative == pytest.approx((counters.num_accepted_tokens + counters.num_drafts) / counters.num_drafts)
    assert abs(cumulative - result.accept_length) > 0.01  # the earlier traffic accepts differently
    metrics = httpx.get(url + "/metrics", trust_env=False).text
    assert f"vllm:spec_decode_num_drafts_total{{model_name=\"toy-table\"}} {counters.num_drafts}" in metrics


def test_concurrent_requests_all_complete_with_exact_token_counts(spec_server):
    _, url = spec_server
    config = BenchConfig(base_url=url, api="sglang", num_prompts=12, concurrency=6, max_tokens=20, warmup=0,
                         ignore_eos=True)
    result = run_bench(config, [Prompt(input_ids=p) for p in PROMPTS])
    assert result.completed == 12 and result.failed == 0
    assert result.output_throughput > 0 and result.request_throughput > 0
    # ignore_eos: every request generated exactly max_tokens, counted from the server's numbers
    assert result.output_throughput * result.duration_s == pytest.approx(12 * 20)


def test_killed_server_gives_a_partial_result_and_no_traceback(tmp_path, capsys):
    from draftlab.cli import main

    script = Path(__file__).with_name("pair_server.py")
    env_path = str(Path(__file__).parents[2] / "src")
    server = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    try:
        port = int(server.stdout.readline())
        prompts = tmp_path / "p.jsonl"
        prompts.write_text("".join(json.dumps({"input_ids": p}) + "\n" for p in PROMPTS))
        out = tmp_path / "r.json"
        # the first finished request kills the server; the rest fail and are counted
        import draftlab.bench.client as client_mod

        original = client_mod.send_request

        async def send_then_kill(*args, **kwargs):
            record = await original(*args, **kwargs)
            if server.poll() is None:
                server.kill()
                server.wait()
            return record

        client_mod.send_request = send_then_kill
        try:
            code = main(["bench", "--base-url", f"http://127.0.0.1:{port}", "--api", "sglang", "--prompts",
                         str(prompts), "--num-prompts", "8", "--max-tokens", "30", "--warmup", "0", "-o", str(out)])
        finally:
            client_mod.send_request = original
    finally:
        if server.poll() is None:
            server.kill()
    captured = capsys.readouterr()
    assert code == 0 and "Traceback" not in captured.err
    result = json.loads(out.read_text())
    assert result["completed"] >= 1 and result["failed"] == 8 - result["completed"]
    assert {e["kind"] for e in result["errors"]} <= {"connect-error", "reset"}
    assert sum(e["count"] for e in result["errors"]) == result["failed"]


def test_a_client_hanging_up_prints_nothing(capfd):
    """A benchmark that times out or is stopped drops its streams: the failed write or flush after
    that is routine and stays off stderr; any other error keeps socketserver's report."""
    ctx = build_context(drafted=False)
    server = make_server(ctx, "127.0.0.1", 0)
    try:
        for gone in (BrokenPipeError(), ConnectionResetError()):
            try:
                raise gone
            except OSError:
                server.handle_error(None, ("127.0.0.1", 1))
        assert capfd.readouterr().err == ""
        try:
            raise ValueError("a real bug")
        except ValueError:
            server.handle_error(None, ("127.0.0.1", 1))
        assert "a real bug" in capfd.readouterr().err
    finally:
        server.server_close()
        ctx.engine.close()
