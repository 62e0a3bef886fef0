"""One benchmark run end to end: model name, warm-up, metrics before, measured run, metrics after."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

import httpx

from draftlab.bench.client import BenchConfig, RequestRecord, RunOutcome, build_bodies, run_requests
from draftlab.bench.result import BenchResult, build_result
from draftlab.bench.server_metrics import snapshot, summarize
from draftlab.bench.workload import APIS, Prompt, check_prompts_fit
from draftlab.engines.metrics import SpecSummary
from draftlab.errors import DraftlabError


def run_bench(
    config: BenchConfig, prompts: list[Prompt], *, on_done: Callable[[RequestRecord], None] | None = None
) -> BenchResult:
    """Run the benchmark; Ctrl-C ends the measured run early and still returns its result."""
    check_bench_config(config, prompts)
    return asyncio.run(bench_async(config, prompts, on_done=on_done))


async def bench_async(
    config: BenchConfig, prompts: list[Prompt], *, on_done: Callable[[RequestRecord], None] | None = None
) -> BenchResult:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=config.base_url, limits=limits, trust_env=False,
                                 timeout=httpx.Timeout(config.timeout_s, connect=10.0)) as client:
        model = config.model if config.api == "sglang" else (config.model or await _first_model(client, config))
        bodies = build_bodies(config, prompts, model)
        if config.warmup:
            warm = _warmup_config(config)
            if (await run_requests(client, warm, build_bodies(warm, prompts, model))).interrupted:
                # Ctrl-C during warm-up ends the run too: nothing measured, every request unfinished
                return build_result(config, RunOutcome([], 0.0, True, len(bodies)),
                                    SpecSummary(None, None, "unavailable: interrupted during warm-up"), model)
        before = await snapshot(client)
        outcome = await run_requests(client, config, bodies, on_done=on_done)
        after = await snapshot(client)
    return build_result(config, outcome, summarize(config.api, outcome.records, before, after), model)


def _warmup_config(config: BenchConfig) -> BenchConfig:
    return replace(config, num_prompts=config.warmup, request_rate=None,
                   concurrency=min(config.concurrency or 1, config.warmup))


async def _first_model(client: httpx.AsyncClient, config: BenchConfig) -> str:
    """The served model's name from ``/v1/models`` (the OpenAI APIs need one in every request)."""
    try:
        response = await client.get("/v1/models", timeout=10.0)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except httpx.ConnectError:
        raise DraftlabError(f"{config.base_url}: cannot connect; is the server running? (draftlab launch / serve)") from None
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
    check_prompts_fit(config.api, prompts)
