"""`draftlab serve` on the trained toy pair under load and faults: 64 concurrent streaming clients with
bad requests among them, clients that hang up mid-stream; every completed response equals generate's
batch-1 greedy output, every bad request gets its HTTP status with an OpenAI-style error body, and the
counters of /metrics and /get_server_info add up to what the clients received."""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import pytest
from pair_server import start

from draftlab.decode.generate import generate
from draftlab.engines.metrics import parse_prometheus
from draftlab.serve.http import MAX_BODY_BYTES
from draftlab.serve.load import load_context

CLIENTS = 64
MAX_NEW = 10
FLAGS = {"steps": 3, "topk": 1, "num_draft_tokens": 4}
WORDS = ["def ", "class ", "import ", "return self.", "    for ", "if not ", "print(", "with open("]
PROMPTS = [list(f"{WORDS[i % len(WORDS)]}{'abcdefgh'[i // len(WORDS)]}_{i}".encode()) for i in range(CLIENTS)]


@pytest.fixture(scope="module")
def served(toy_pair, tmp_path_factory):
    """The server on the toy pair, and generate's batch-1 greedy results on PROMPTS."""
    prompts = tmp_path_factory.mktemp("load") / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": ids}) + "\n" for ids in PROMPTS))
    expected = generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, max_new_tokens=MAX_NEW, **FLAGS)
    assert expected.mean_accept_length > 1.5  # the pair accepts for real
    ctx = load_context(toy_pair.target_dir, toy_pair.drafter_dir, **FLAGS)
    assert ctx.context_len == 2048 and ctx.vocab_size == 260
    server, url = start(ctx)
    yield ctx, url, expected.results
    server.shutdown()
    ctx.engine.close()


def _sse(response: httpx.Response):
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


def _stream_generate(url: str, ids: list[int], max_new: int = MAX_NEW) -> dict:
    body = {"input_ids": ids, "stream": True, "sampling_params": {"max_new_tokens": max_new, "temperature": 0}}
    with httpx.stream("POST", url + "/generate", json=body, timeout=60, trust_env=False) as r:
        assert r.status_code == 200
        events = list(_sse(r))
    last = events[-1]
    return {"ids": last["output_ids"], "finish": last["meta_info"]["finish_reason"]["type"],
            "verify_ct": last["meta_info"]["spec_verify_ct"], "correct": last["meta_info"]["spec_num_correct_drafts"]}


def _stream_completion(url: str, ids: list[int]) -> dict:
    body = {"prompt": ids, "max_tokens": MAX_NEW, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60, trust_env=False) as r:
        assert r.status_code == 200
        chunks = list(_sse(r))
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1]
    return {"text": text, "finish": finish, "usage": chunks[-1]["usage"]}


def _raw(url: str, request: bytes) -> tuple[int, dict]:
    """Send bytes as they are (headers httpx would correct); the status and JSON body of the answer."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def _post(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


LONG = [65] * 2048  # fills the toy target's context of 2048
BAD = [  # (raw request, status, words the error message must hold)
    (_post("/generate", b"{not json"), 400, "not valid JSON"),
    (_post("/v1/completions", b'{"prompt": [1, 2'), 400, "not valid JSON"),
    (_post("/generate", b"[" * 100_000), 400, "not valid JSON"),
    (_post("/generate", b'{"text": "\xff\xfe"}'), 400, "not valid JSON"),
    (_post("/v1/completions", b'"a string"'), 400, "JSON object"),
    (_post("/generate", b'{"text": 5}'), 400, "'text'"),
    (_post("/generate", b'{"input_ids": [[1, 2]]}'), 400, "'input_ids'"),
    (_post("/generate", b'{"input_ids": [1, 99999]}'), 400, "outside the model's vocabulary of 260"),
    (_post("/v1/completions", b'{"prompt": "x", "max_tokens": -1}'), 400, "'max_tokens'"),
    (_post("/v1/completions", b'{"prompt": "x", "max_tokens": "ten"}'), 400, "'max_tokens'"),
    (_post("/v1/completions", b'{"prompt": "x", "temperature": NaN}'), 400, "'temperature'"),
    (_post("/v1/completions", b'{"prompt": "x", "seed": 1180591620717411303424}'), 400, "seed"),
    (_post("/v1/chat/completions", b'{"messages": "hi"}'), 400, "'messages'"),
    (_post("/generate", json.dumps({"input_ids": LONG}).encode()), 400,
     "The input (2048 tokens) is longer than the model's context length (2048 tokens)"),
    (_post("/v1/completions", json.dumps({"prompt": "x" * 3000}).encode()), 400, "longer than the model's context"),
    (_post("/v1/completions", json.dumps({"prompt": LONG[:40], "max_tokens": 2008}).encode()), 400,
     "maximum context length of 2048 tokens. You requested a total of 2048 tokens"),
    (_post("/nowhere", b"{}"), 404, "no route"),
    (b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400, "Content-Length"),
    (f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode(), 413,
     "Content-Length"),
]


def _metrics(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=30, trust_env=False).text
    out: dict[str, float] = {}
    for name, labels, value in parse_prometheus(text):
        key = name + "".join(f"[{labels[k]}]" for k in ("finished_reason", "position") if k in labels)
        out[key] = value
    return out


def test_concurrent_clients_and_bad_requests(served):
    ctx, url, expected = served
    barrier = threading.Barrier(CLIENTS)

    def client(i: int) -> dict:
        barrier.wait()  # all 64 connect at once
        return _stream_generate(url, PROMPTS[i]) if i % 2 == 0 else _stream_completion(url, PROMPTS[i])

    with ThreadPoolExecutor(CLIENTS + len(BAD)) as pool:
        bad = [pool.submit(_raw, url, request) for request, _, _ in BAD]
        results = list(pool.map(client, range(CLIENTS)))
        answers = [f.result() for f in bad]

    for (_, status, words), (got, body) in zip(BAD, answers):
        assert got == status and body["object"] == "error" and body["error"]["code"] == status
        assert words in body["error"]["message"] and body["error"]["type"]
    eos = ctx.eos_token_ids
    for i, (got, want) in enumerate(zip(results, expected)):
        finish = "stop" if want.output_ids[-1] in eos else "length"
        if i % 2 == 0:
            assert got["ids"] == want.output_ids and got["finish"] == finish
            assert got["verify_ct"] == len(want.accept_lengths)
            assert got["correct"] == sum(a - 1 for a in want.accept_lengths)
        else:
            assert got["text"] == ctx.tokenizer.decode(want.output_ids, skip_special_tokens=True)
            assert got["finish"] == finish
            assert got["usage"] == {"prompt_tokens": len(PROMPTS[i]), "completion_tokens": len(want.output_ids),
                                    "total_tokens": len(PROMPTS[i]) + len(want.output_ids)}

    # the counters hold exactly the 64 completed requests: refused ones never reached the decoder
    m = _metrics(url)
    drafts = sum(len(r.accept_lengths) for r in expected)
    accepted = sum(a - 1 for r in expected for a in r.accept_lengths)
    stops = sum(r.output_ids[-1] in eos for r in expected)
    assert m["vllm:generation_tokens_total"] == sum(len(r.output_ids) for r in expected)
    assert m["vllm:prompt_tokens_total"] == sum(map(len, PROMPTS))
    assert m["vllm:request_success_total[stop]"] == stops
    assert m["vllm:request_success_total[length]"] == CLIENTS - stops
    assert m["vllm:request_success_total[abort]"] == 0
    assert m["vllm:spec_decode_num_drafts_total"] == drafts
    assert m["vllm:spec_decode_num_draft_tokens_total"] == drafts * (FLAGS["num_draft_tokens"] - 1)
    assert m["vllm:spec_decode_num_accepted_tokens_total"] == accepted
    per_pos = [m[f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{p}]"] for p in range(FLAGS["steps"])]
    assert sum(per_pos) == accepted and per_pos == sorted(per_pos, reverse=True)
    info = httpx.get(url + "/get_server_info", timeout=30, trust_env=False).json()
    assert info["internal_states"][0]["avg_spec_accept_length"] == pytest.approx((accepted + drafts) / drafts)


def test_clients_hanging_up_mid_stream(served):
    """Clients that read one event and leave cancel their decodes; the server goes on serving, exactly."""
    ctx, url, expected = served
    before = _metrics(url)
    leaving = 6

    def leave(i: int) -> None:
        body = {"input_ids": PROMPTS[i], "stream": True, "sampling_params": {"max_new_tokens": 1500, "temperature": 0,
                                                                             "ignore_eos": True}}
        with httpx.stream("POST", url + "/generate", json=body, timeout=60, trust_env=False) as r:
            next(r.iter_lines())  # the first event, then hang up

    with ThreadPoolExecutor(leaving) as pool:
        list(pool.map(leave, range(leaving)))
    after_leaving = _stream_generate(url, PROMPTS[1])  # queued behind the cancelled decodes
    assert after_leaving["ids"] == expected[1].output_ids
    m = _metrics(url)
    assert m["vllm:request_success_total[abort]"] - before["vllm:request_success_total[abort]"] == leaving
    completed = sum(m[f"vllm:request_success_total[{r}]"] - before[f"vllm:request_success_total[{r}]"]
                    for r in ("stop", "length"))
    assert completed == 1
    new_tokens = m["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    assert len(expected[1].output_ids) < new_tokens < len(expected[1].output_ids) + leaving * 1500 / 2
    accepted = m["vllm:spec_decode_num_accepted_tokens_total"]
    per_pos = [m[f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{p}]"] for p in range(FLAGS["steps"])]
    assert sum(per_pos) == accepted
    assert m["vllm:spec_decode_num_draft_tokens_total"] == 3 * m["vllm:spec_decode_num_drafts_total"]
    assert httpx.get(url + "/health", timeout=30, trust_env=False).status_code == 200
