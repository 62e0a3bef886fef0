"""Is the benchmark client fast and accurate enough not to distort what it measures?

Starts, in a child process, a minimal asyncio HTTP/1.1 server that answers /v1/chat/completions
with an SSE stream of N chunks (chunked transfer encoding, keep-alive, a final usage chunk and
[DONE]) and then drives it with draftlab's client:

1. throughput: C concurrent streams, the server writing chunks as fast as it can; reports streamed
   chunks per second seen by the client (usage.completion_tokens = chunks, one token each);
2. timing accuracy: the server paces every stream at a fixed gap; the client's measured
   inter-chunk latency minus that gap is the client's own timing overhead (queueing in its event
   loop, parsing), reported at p50 / p99.

    python benchmarks/bench_client.py [--concurrency 256] [--chunks 200] [--requests 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from draftlab.bench.client import BenchConfig  # noqa: E402
from draftlab.bench.run import bench_async  # noqa: E402
from draftlab.bench.workload import Prompt  # noqa: E402


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict) -> bytes:
    return _chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n_chunks: int, gap_s: float) -> None:
    token = _event({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "x"}}]})
    usage = _event({"object": "chat.completion.chunk", "choices": [],
                    "usage": {"prompt_tokens": 1, "completion_tokens": n_chunks, "total_tokens": n_chunks + 1}})
    done = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    models = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode()
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            path = head.split(b" ", 2)[1]
            if path != b"/v1/chat/completions":
                body = models if path == b"/v1/models" else b"{}"
                status = b"200 OK" if path == b"/v1/models" else b"404 Not Found"
                writer.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (status, len(body), body))
                await writer.drain()
                continue
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            start = time.perf_counter()
            for i in range(n_chunks):
                writer.write(token)
                await writer.drain()
                # paced: on an absolute schedule so sleep overshoot does not accumulate
                await asyncio.sleep(max(0.0, start + (i + 1) * gap_s - time.perf_counter()) if gap_s else 0)
            writer.write(usage + done)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def _serve(port: int, n_chunks: int, gap_s: float, ready: mp.Event) -> None:
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: _handle(r, w, n_chunks, gap_s), "127.0.0.1", port, backlog=4096)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(concurrency: int, requests: int, chunks: int, gap_s: float) -> dict:
    """Run one client measurement against a fresh server process; returns the numbers."""
    port = _free_port()
    ready = mp.Event()
    server = mp.Process(target=_serve, args=(port, chunks, gap_s, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(30):
            raise RuntimeError("benchmark server did not start")
        config = BenchConfig(base_url=f"http://127.0.0.1:{port}", api="openai-chat", num_prompts=requests,
                             concurrency=concurrency, max_tokens=chunks, warmup=0)
        cpu0 = time.process_time()
        result = asyncio.run(bench_async(config, [Prompt(text="hi")]))
        cpu = time.process_time() - cpu0
    finally:
        server.terminate()
        server.join()
    total_chunks = result.output_throughput * result.duration_s
    return {
        "concurrency": concurrency, "requests": requests, "chunks_per_request": chunks, "gap_ms": gap_s * 1e3,
        "completed": result.completed, "failed": result.failed, "duration_s": round(result.duration_s, 3),
        "chunks_per_s": round(total_chunks / result.duration_s), "client_cpu_us_per_chunk": round(cpu / total_chunks * 1e6, 1),
        "itl_ms": {k: round(v, 3) for k, v in result.itl_ms.items()},
        "itl_overhead_ms_p50": round(result.itl_ms["p50"] - gap_s * 1e3, 3),
        "itl_overhead_ms_p99": round(result.itl_ms["p99"] - gap_s * 1e3, 3),
        "ttft_ms": {k: round(v, 3) for k, v in result.ttft_ms.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--requests", type=int, default=1024)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--paced-gap-ms", type=float, default=20.0)
    parser.add_argument("--paced-concurrency", type=int, default=64)
    args = parser.parse_args()
    fast = run(args.concurrency, args.requests, args.chunks, 0.0)
    print(json.dumps({"throughput": fast}, indent=2), flush=True)
    paced = run(args.paced_concurrency, args.paced_concurrency * 2, 50, args.paced_gap_ms / 1e3)
    print(json.dumps({"timing": paced}, indent=2))


if __name__ == "__main__":
    main()
