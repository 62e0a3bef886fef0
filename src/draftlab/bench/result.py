"""The benchmark result (the ``bench -o`` JSON contract) and how it is computed from the records."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draftlab import jsonio
from draftlab.bench.client import BenchConfig, RunOutcome
from draftlab.bench.stats import summarize_ms
from draftlab.engines.metrics import SpecSummary
from draftlab.errors import DraftlabError

CONTRACT_KEYS = (
    "config", "completed", "failed", "duration_s", "output_throughput", "request_throughput",
    "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "accept_length", "acceptance_by_position", "errors",
)


@dataclass
class BenchResult:
    """One run. Latencies in ms (mean/p50/p90/p99), throughputs per second of the measured run."""

    config: dict[str, Any]
    completed: int
    failed: int
    duration_s: float
    output_throughput: float
    request_throughput: float
    ttft_ms: dict[str, float | None]
    tpot_ms: dict[str, float | None]
    itl_ms: dict[str, float | None]
    e2e_ms: dict[str, float | None]
    accept_length: float | None
    acceptance_by_position: list[float] | None
    errors: list[dict[str, Any]]


def build_result(config: BenchConfig, outcome: RunOutcome, spec: SpecSummary, model: str | None) -> BenchResult:
    """Aggregate the measured requests; failures grouped by kind with one example message each."""
    ok = [r for r in outcome.records if r.ok]
    failed = [r for r in outcome.records if not r.ok]
    kinds = Counter(r.error_kind for r in failed)
    examples = {r.error_kind: r.error for r in reversed(failed)}
    errors = [{"kind": k, "count": c, "example": examples[k]} for k, c in kinds.most_common()]
    if outcome.interrupted and outcome.unfinished:
        errors.append({"kind": "interrupted", "count": outcome.unfinished, "example": "run stopped before these finished"})
    elif outcome.timed_out and outcome.unfinished:
        cut = {"kind": "timeout", "count": outcome.unfinished,
               "example": f"the run reached --timeout {config.run_timeout_s:g} s before these finished"}
        same = next((e for e in errors if e["kind"] == "timeout"), None)
        if same is None:
            errors.append(cut)
        else:
            same["count"] += outcome.unfinished
    duration = outcome.duration_s
    tokens = sum(r.output_tokens for r in ok)
    tpot = [(r.e2e_s - r.ttft_s) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    cfg = dataclasses.asdict(config)
    cfg.update(model=model, interrupted=outcome.interrupted, timed_out=outcome.timed_out, spec_metrics=spec.source)
    return BenchResult(
        config=cfg,
        completed=len(ok),
        failed=len(failed) + (outcome.unfinished if outcome.interrupted or outcome.timed_out else 0),
        duration_s=duration,
        output_throughput=tokens / duration if duration > 0 else 0.0,
        request_throughput=len(ok) / duration if duration > 0 else 0.0,
        ttft_ms=summarize_ms([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_ms=summarize_ms(tpot),
        itl_ms=summarize_ms([x for r in ok for x in r.itl_s]),
        e2e_ms=summarize_ms([r.e2e_s for r in ok if r.e2e_s is not None]),
        accept_length=spec.accept_length,
        acceptance_by_position=spec.acceptance_by_position,
        errors=errors,
    )


def load_result(path: str | Path) -> BenchResult:
    """Read a result file written by ``bench -o``, checking it has every contract field."""
    path = Path(path)
    data = jsonio.read(path, "result file not found; write one with draftlab bench -o FILE")
    missing = [k for k in CONTRACT_KEYS if not isinstance(data, dict) or k not in data]
    if missing:
        raise DraftlabError(f"not a draftlab bench result: missing {', '.join(missing)}", path=path)
    return BenchResult(**{k: data[k] for k in CONTRACT_KEYS})
