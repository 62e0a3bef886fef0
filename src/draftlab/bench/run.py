"""One benchmark run end to end: model name, warm-up, metrics before, measured run, metrics after."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import replace

import httpx

from draftlab.bench.client import BenchConfig, RequestRecord, RunOutcome, build_bodies, run_requests
from draftlab.bench.result import BenchResult, build_result
from draftlab.bench.server_metrics import Snapshot, snapshot, summarize
from draftlab.bench.workload import APIS, Prompt, check_prompts_fit
from draftlab.engines.metrics import SpecSummary
from draftlab.errors import DraftlabError


def run_bench(
    config: BenchConfig, prompts: list[Prompt], *, on_done: Callable[[RequestRecord], None] | None = None
) -> BenchResult:
    """Run the benchmark; Ctrl-C, or the run's deadline (``run_timeout_s``), ends it early and it still
    returns its result."""
    check_bench_config(config, prompts)
    return asyncio.run(bench_async(config, prompts, on_done=on_done))


PROBE_S = 10.0  # the longest a server probe (model list, /metrics, /get_server_info) may take


def _probe_cap(config: BenchConfig) -> float:
    """A server probe's time limit: at most a tenth of the run's own, so probes of a silent server leave
    the requests their time."""
    return PROBE_S if config.run_timeout_s is None else min(PROBE_S, config.run_timeout_s / 10)


async def bench_async(
    config: BenchConfig, prompts: list[Prompt], *, on_done: Callable[[RequestRecord], None] | None = None
) -> BenchResult:
    deadline = None if config.run_timeout_s is None else time.monotonic() + config.run_timeout_s
    cap = _probe_cap(config)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=config.base_url, limits=limits, trust_env=False,
                                 timeout=httpx.Timeout(config.timeout_s, connect=_left(deadline, PROBE_S))) as client:
        n = config.num_prompts or len(prompts)
        if config.api == "sglang" or config.model:
            model = config.model
        else:
            try:
                model = await _first_model(client, config, _left(deadline, cap))
            except asyncio.CancelledError:  # Ctrl-C before anything was sent
                _uncancel()
                return _nothing_measured(config, n, None, interrupted=True)
        bodies = build_bodies(config, prompts, model)
        if config.warmup:
            warm = _warmup_config(config)
            done = await run_requests(client, warm, build_bodies(warm, prompts, model), deadline=deadline)
            if done.interrupted or done.timed_out:  # nothing measured: every request unfinished
                return _nothing_measured(config, len(bodies), model, interrupted=done.interrupted)
        try:
            before = await snapshot(client, _left(deadline, cap))
        except asyncio.CancelledError:
            _uncancel()
            return _nothing_measured(config, len(bodies), model, interrupted=True)
        outcome = await run_requests(client, config, bodies, on_done=on_done, deadline=deadline)
        after = Snapshot(None, None)
        if not outcome.interrupted:  # Ctrl-C leaves at once, without asking the server again
            try:
                after = await snapshot(client, _left(deadline, cap))
            except asyncio.CancelledError:
                _uncancel()
                outcome.interrupted = True
    return build_result(config, outcome, summarize(config.api, outcome.records, before, after), model)


def _left(deadline: float | None, cap: float) -> float:
    """Seconds a step may still wait: ``cap``, or less when the run's deadline is nearer (0 once it passed)."""
    return cap if deadline is None else max(0.0, min(cap, deadline - time.monotonic()))


def _uncancel() -> None:
    """Ctrl-C (a cancellation of the run's task) ends the run here; what follows still reports it."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _nothing_measured(config: BenchConfig, unfinished: int, model: str | None, *, interrupted: bool) -> BenchResult:
    """The result of a run cut short before its measured requests: every one of them unfinished."""
    why = "interrupted" if interrupted else f"the run reached --timeout {config.run_timeout_s:g} s"
    outcome = RunOutcome([], 0.0, interrupted, unfinished, timed_out=not interrupted)
    return build_result(config, outcome, SpecSummary(None, None, f"unavailable: {why} before the measured run"),
                        model)


def _warmup_config(config: BenchConfig) -> BenchConfig:
    return replace(config, num_prompts=config.warmup, request_rate=None,
                   concurrency=min(config.concurrency or 1, config.warmup))


async def _first_model(client: httpx.AsyncClient, config: BenchConfig, timeout: float) -> str:
    """The served model's name from ``/v1/models`` (the OpenAI APIs need one in every request)."""
    try:
        response = await client.get("/v1/models", timeout=timeout)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except httpx.ConnectError:
        raise DraftlabError(f"{config.base_url}: cannot connect; is the server running? (draftlab launch / serve)") from None
    except httpx.TimeoutException:
        raise DraftlabError(f"{config.base_url}/v1/models did not answer within {timeout:g} s; is the server up? "
                            "(or pass --model NAME)") from None
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        raise DraftlabError(f"{config.base_url}/v1/models gave no model id; pass --model NAME") from None


def check_bench_config(config: BenchConfig, prompts: list[Prompt]) -> None:
    """Refuse a run that cannot work, before any request is sent (sweep checks every entry up front)."""
    if config.api not in APIS:
        raise DraftlabError(f"--api {config.api!r} is unknown; choose one of {', '.join(APIS)}")
    if not config.base_url.startswith(("http://", "https://")):
        raise DraftlabError(f"--base-url {config.base_url!r} must start with http:// or https://")
    for name in ("num_prompts", "concurrency", "max_tokens"):
        value = getattr(config, name)
        if value is not None and value < 1:
            raise DraftlabError(f"--{name.replace('_', '-')} must be at least 1 (got {value})")
    if config.request_rate is not None and config.request_rate <= 0:
        raise DraftlabError(f"--request-rate must be positive (got {config.request_rate})")
    if config.warmup < 0:
        raise DraftlabError(f"--warmup must be 0 or more (got {config.warmup})")
    for name, value in (("--timeout", config.timeout_s), ("--timeout", config.run_timeout_s)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise DraftlabError(f"{name} {value}: must be a finite number of seconds > 0")
    check_prompts_fit(config.api, prompts)
