"""Speculation numbers for a measured run, read from the server around it.

Which source is used, best first: SGLang ``/generate`` per-request ``meta_info`` (exact, only with
``--api sglang``); vLLM ``/metrics`` counter deltas (exact when nothing else hits the server
during the run). SGLang's ``/get_server_info`` average is lifetime-cumulative with no count, so
alone it cannot give a run's number: the result then says so instead of reporting a wrong one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx

from draftlab.bench.client import RequestRecord
from draftlab.engines.metrics import (
    SGLANG_SERVER_INFO_PATH,
    SpecSummary,
    VllmSpecCounters,
    sglang_meta_accept_length,
    sglang_server_accept_length,
    vllm_delta,
)


@dataclass(frozen=True)
class Snapshot:
    """What the server exposes at one moment (None where it exposes nothing or is unreachable)."""

    vllm: VllmSpecCounters | None
    sglang_cumulative: float | None


async def snapshot(client: httpx.AsyncClient, timeout: float = 10.0) -> Snapshot:
    """Scrape ``/metrics`` and ``/get_server_info`` together, each within ``timeout`` seconds; a missing
    endpoint, a dead or silent server, or no time left (``timeout`` 0) gives None."""
    if timeout <= 0:
        return Snapshot(None, None)
    metrics, info = await asyncio.gather(_get(client, "/metrics", timeout), _get(client, SGLANG_SERVER_INFO_PATH,
                                                                                 timeout))
    vllm = VllmSpecCounters.from_prometheus(metrics.text) if metrics is not None else None
    try:
        cumulative = sglang_server_accept_length(info.json()) if info is not None else None
    except ValueError:
        cumulative = None
    return Snapshot(vllm, cumulative)


async def _get(client: httpx.AsyncClient, path: str, timeout: float) -> httpx.Response | None:
    """``path``'s response when it answers 200 within ``timeout`` seconds, else None."""
    try:
        response = await client.get(path, timeout=timeout)
    except httpx.HTTPError:
        return None
    return response if response.status_code == 200 else None


def summarize(api: str, records: list[RequestRecord], before: Snapshot, after: Snapshot) -> SpecSummary:
    """The run's accept length and per-position acceptance from the best available source."""
    by_position = None
    vllm = None
    if before.vllm is not None and after.vllm is not None:
        vllm = vllm_delta(before.vllm, after.vllm)
        by_position = vllm.acceptance_by_position
    if api == "sglang":
        meta = sglang_meta_accept_length(r.meta for r in records if r.ok and r.meta)
        if meta is not None:
            return SpecSummary(meta, by_position, "sglang /generate meta_info (spec_verify_ct)")
    if vllm is not None and vllm.accept_length is not None:
        return vllm
    if after.sglang_cumulative is not None:
        return SpecSummary(
            None,
            None,
            "unavailable: SGLang's /get_server_info average is lifetime-cumulative (includes warm-up "
            "and earlier traffic); use --api sglang for per-request counts",
        )
    if vllm is not None:
        return vllm
    return SpecSummary(None, None, "unavailable: the server exposes no speculative metrics")
