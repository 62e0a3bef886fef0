"""The streaming benchmark client: send prompts at a concurrency or a Poisson rate, time every chunk.

One request = one streaming HTTP call. Its time to first token is the first chunk that carries
output, its inter-token latencies are the gaps between such chunks (under speculation one chunk
holds a whole verify cycle, so these are per-chunk latencies), its output length is what the
server reports. A failed request is recorded by kind and the run goes on; Ctrl-C (task
cancellation) ends the run early with what was measured.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from draftlab.bench.chunks import MalformedStream, StreamState, read_chunk
from draftlab.bench.sse import SSEDecoder
from draftlab.bench.workload import API_PATHS, Prompt, request_body


@dataclass(frozen=True)
class BenchConfig:
    """Everything that defines a run; written into the result's ``config``."""

    base_url: str
    api: str = "openai-chat"
    num_prompts: int | None = None  # None: every prompt once
    concurrency: int | None = None  # max requests in flight; None with no rate: 1
    request_rate: float | None = None  # Poisson arrivals per second; None: as fast as concurrency allows
    max_tokens: int = 128
    ignore_eos: bool = False
    temperature: float = 0.0
    warmup: int = 1
    model: str | None = None  # OpenAI "model"; None: the first id of /v1/models
    timeout_s: float = 600.0  # per request, without data
    seed: int = 0
    label: str | None = None
    run_timeout_s: float | None = None  # the whole run (model lookup, warm-up, server probes, requests)
    synthetic_acceptance: dict[str, Any] | None = None  # the server forced this acceptance (SyntheticAcceptance.record)


@dataclass
class RequestRecord:
    """One measured request."""

    ok: bool
    start: float
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    e2e_s: float | None = None
    output_tokens: int = 0
    meta: dict[str, Any] | None = None
    error_kind: str | None = None
    error: str | None = None


async def send_request(
    client: httpx.AsyncClient, api: str, body: dict[str, Any], *, timeout_s: float
) -> RequestRecord:
    """Stream one request to completion; failures come back as a record, never raised."""
    start = time.perf_counter()
    record = RequestRecord(ok=False, start=start)
    state = StreamState()
    decoder = SSEDecoder()
    last = start
    try:
        async with client.stream("POST", API_PATHS[api], json=body, timeout=timeout_s) as response:
            if response.status_code >= 400:
                text = (await response.aread()).decode("utf-8", errors="replace")
                return _failed(record, "http-error", f"HTTP {response.status_code}: {text[:200]}")
            async for raw in response.aiter_raw():
                events = decoder.feed(raw)
                if not events:
                    continue
                now = time.perf_counter()
                if _apply(api, events, state):
                    if record.ttft_s is None:
                        record.ttft_s = now - start
                    else:
                        record.itl_s.append(now - last)
                    last = now
            if _apply(api, decoder.close(), state) and record.ttft_s is None:
                record.ttft_s = time.perf_counter() - start
    except MalformedStream as exc:
        return _failed(record, "malformed-stream", str(exc))
    except httpx.TimeoutException as exc:
        return _failed(record, "timeout", f"{type(exc).__name__}: no data for {timeout_s:g} s")
    except httpx.ConnectError as exc:
        return _failed(record, "connect-error", str(exc) or type(exc).__name__)
    except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as exc:
        return _failed(record, "reset", str(exc) or type(exc).__name__)
    except httpx.HTTPError as exc:
        return _failed(record, "http-error", str(exc) or type(exc).__name__)
    record.e2e_s = time.perf_counter() - start
    return _finish(api, record, state)


def _apply(api: str, events: list[str], state: StreamState) -> bool:
    new_output = False
    for payload in events:
        new_output = read_chunk(api, payload, state) or new_output
    return new_output


def _finish(api: str, record: RequestRecord, state: StreamState) -> RequestRecord:
    if state.completion_tokens is None:
        why = "no usage chunk (the server ignored stream_options.include_usage"
        why += "; vLLM: --enable-force-include-usage)" if api != "sglang" else ")"
        return _failed(record, "malformed-stream", why)
    if api != "sglang" and not state.done:
        return _failed(record, "malformed-stream", "stream ended without data: [DONE]")
    if state.completion_tokens > 0 and record.ttft_s is None:
        return _failed(record, "malformed-stream", "usage reports tokens but no chunk carried output")
    record.ok = True
    record.output_tokens = state.completion_tokens
    record.meta = state.meta
    return record


def _failed(record: RequestRecord, kind: str, message: str) -> RequestRecord:
    record.ok = False
    record.error_kind = kind
    record.error = message
    return record


@dataclass
class RunOutcome:
    """The measured requests of one run, and whether it was cut short (Ctrl-C, or the run's deadline)."""

    records: list[RequestRecord]
    duration_s: float  # wall time from the first request sent to the last one ended (or the cut)
    interrupted: bool
    unfinished: int  # requests in flight or not yet sent when the run was cut short
    timed_out: bool = False  # the run's deadline (--timeout) passed first


async def run_requests(
    client: httpx.AsyncClient,
    config: BenchConfig,
    bodies: list[dict[str, Any]],
    *,
    on_done: Callable[[RequestRecord], None] | None = None,
    deadline: float | None = None,
) -> RunOutcome:
    """Send ``bodies`` with ``config``'s concurrency / arrival process; survive cancellation (Ctrl-C) and
    stop at ``deadline`` (``time.monotonic()`` seconds), the requests still open then unfinished."""
    limit = config.concurrency or (None if config.request_rate else 1)
    gate = asyncio.Semaphore(limit) if limit else None
    rng = random.Random(config.seed)
    records: list[RequestRecord] = []
    tasks: set[asyncio.Task[None]] = set()

    async def one(body: dict[str, Any]) -> None:
        try:
            record = await send_request(client, config.api, body, timeout_s=config.timeout_s)
        finally:
            if gate is not None:
                gate.release()
        records.append(record)
        if on_done is not None:
            on_done(record)

    start = time.perf_counter()
    interrupted = False
    expired: list[bool] = []
    current = asyncio.current_task()
    timer = None
    if deadline is not None and current is not None:
        def expire() -> None:
            expired.append(True)
            current.cancel()
        timer = asyncio.get_running_loop().call_later(max(0.0, deadline - time.monotonic()), expire)
    try:
        for i, body in enumerate(bodies):
            if config.request_rate and i > 0:
                await asyncio.sleep(rng.expovariate(config.request_rate))
            if gate is not None:
                await gate.acquire()
            task = asyncio.create_task(one(body))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        interrupted = not expired
        if current is not None:
            current.uncancel()  # the run ends here; the caller still reports what was measured
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        if timer is not None:
            timer.cancel()
    duration = time.perf_counter() - start
    return RunOutcome(records, duration, interrupted, len(bodies) - len(records), timed_out=bool(expired))


def build_bodies(config: BenchConfig, prompts: list[Prompt], model: str | None) -> list[dict[str, Any]]:
    """One request body per measured prompt (prompts are cycled to reach ``num_prompts``)."""
    n = config.num_prompts or len(prompts)
    return [
        request_body(
            config.api,
            prompts[i % len(prompts)],
            model=model,
            max_tokens=config.max_tokens,
            temperature=config.temperature,
            ignore_eos=config.ignore_eos,
        )
        for i in range(n)
    ]
