"""Failures are counted by kind and never stop the run; compare and the CLI contract."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from draftlab.bench.client import BenchConfig
from draftlab.bench.compare import compare_results
from draftlab.bench.result import CONTRACT_KEYS
from draftlab.bench.run import run_bench
from draftlab.bench.workload import Prompt


class Misbehaving(BaseHTTPRequestHandler):
    """Prompt text picks the misbehaviour: ok, 500, garbage, nousage, slow."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = body["prompt"]
        if mode == "500":
            msg = b'{"error": "overloaded"}'
            self.send_response(500)
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        if mode == "slow":
            time.sleep(1.5)
        chunk = {"choices": [{"index": 0, "text": "ab"}]}
        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if mode == "garbage":
            self.wfile.write(b"data: {oops\n\n")
        if mode != "nousage":
            usage = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}
            self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


class QuietServer(ThreadingHTTPServer):
    """The "slow" request writes after the client gave up: a broken pipe, expected, not printed
    (socketserver's report would land in a later test's captured stderr)."""

    daemon_threads = True

    def handle_error(self, request, client_address):
        pass


@pytest.fixture(scope="module")
def bad_url():
    server = QuietServer(("127.0.0.1", 0), Misbehaving)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_each_failure_kind_counted_and_the_run_goes_on(bad_url):
    modes = ["ok", "500", "garbage", "nousage", "slow", "ok"]
    config = BenchConfig(base_url=bad_url, api="openai", model="m", concurrency=3, warmup=0, timeout_s=0.5)
    result = run_bench(config, [Prompt(text=m) for m in modes])
    kinds = {e["kind"]: e["count"] for e in result.errors}
    assert result.completed == 2
    assert kinds == {"http-error": 1, "malformed-stream": 2, "timeout": 1}
    assert result.failed == 4
    example = next(e["example"] for e in result.errors if e["kind"] == "http-error")
    assert "HTTP 500" in example and "overloaded" in example
    assert result.output_throughput * result.duration_s == pytest.approx(4)  # 2 ok x 2 usage tokens


def test_bench_cli_json_contract_and_compare(bad_url, tmp_path, capsys):
    from draftlab.cli import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "ok"}\n')
    files = []
    for label, conc in (("base", 1), ("base", 2), ("eagle", 1), ("eagle", 2)):
        out = tmp_path / f"{label}{conc}.json"
        code = main(["bench", "--base-url", bad_url, "--api", "openai", "--model", "m", "--prompts", str(prompts),
                     "--num-prompts", "2", "--concurrency", str(conc), "--label", label, "--warmup", "0",
                     "-o", str(out), "--json"])
        assert code == 0
        printed = json.loads(capsys.readouterr().out)  # exactly one JSON document on stdout
        assert tuple(printed) == (*CONTRACT_KEYS, "provenance") and json.loads(out.read_text()) == printed
        files.append(out)
    plot = tmp_path / "cmp.png"
    result = compare_results(files, plot=plot)
    assert result.baseline == "base"
    by = {(r.label, r.concurrency): r for r in result.rows}
    assert by[("base", 2)].speedup == pytest.approx(1.0)
    eagle = by[("eagle", 2)]
    assert eagle.speedup == pytest.approx(eagle.output_throughput / by[("base", 2)].output_throughput)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv,needle", [
    (["bench", "--base-url", "http://127.0.0.1:1", "--prompts", "/nonexistent.jsonl"], "prompts file not found"),
    (["bench", "--base-url", "http://127.0.0.1:1"], "needs --base-url URL and --prompts"),
    (["bench", "compare", "/nonexistent.json"], "result file not found"),
])
def test_bad_input_is_one_line_exit_2(argv, needle, capsys):
    from draftlab.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_unreachable_server_for_model_lookup(tmp_path, capsys):
    from draftlab.cli import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x"}\n')
    assert main(["bench", "--base-url", "http://127.0.0.1:9", "--prompts", str(prompts)]) == 2
    assert "cannot connect" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["all-500", "nobody-listening"])
def test_no_completed_request_exits_1_and_still_writes_the_result(bad_url, where, tmp_path, capsys):
    from draftlab.cli import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "500"}\n')
    url = bad_url if where == "all-500" else "http://127.0.0.1:9"
    out = tmp_path / "r.json"
    code = main(["bench", "--base-url", url, "--api", "openai", "--model", "m", "--prompts", str(prompts),
                 "--num-prompts", "2", "--warmup", "0", "-o", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 1
    assert "no request completed (2 failed)" in captured.err
    doc = json.loads(out.read_text())
    assert doc["completed"] == 0 and doc["failed"] == 2 and json.loads(captured.out) == doc
