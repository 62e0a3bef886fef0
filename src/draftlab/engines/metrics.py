"""Speculative-decoding metrics as each engine exposes them, and the accept length derived from them.

- vLLM: Prometheus counters on ``/metrics`` (``vllm:spec_decode_num_drafts``,
  ``..._num_draft_tokens``, ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos{position}``,
  exposed with a ``_total`` suffix). Counters are lifetime totals, so a run's numbers are the
  difference of two scrapes: accept length = 1 + accepted / drafts, per-position rate =
  accepted_per_pos[i] / drafts.
- SGLang: per-request ``meta_info`` on ``/generate`` (``spec_verify_ct``, the verify passes of that
  request, and in newer versions ``spec_num_correct_drafts``). ``/get_server_info``'s
  ``internal_states[0].avg_spec_accept_length`` is a lifetime-cumulative average that includes
  warm-up traffic and carries no count, so no run delta can be derived from it alone.

Accept length counts the bonus token (tokens committed per verify cycle); the prefill's first
token belongs to no cycle (DESIGN.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

VLLM_NUM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_NUM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"

SGLANG_SERVER_INFO_PATH = "/get_server_info"
SGLANG_AVG_ACCEPT = "avg_spec_accept_length"

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$"
)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition as (name, labels, value); comments skipped."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        samples.append((match["name"], labels, value))
    return samples


@dataclass(frozen=True)
class VllmSpecCounters:
    """One scrape of vLLM's lifetime spec-decode counters (summed over engines and models)."""

    num_drafts: float
    num_draft_tokens: float
    num_accepted_tokens: float
    accepted_per_pos: tuple[float, ...]

    @classmethod
    def from_prometheus(cls, text: str) -> VllmSpecCounters | None:
        """The counters in ``text``, or None when the server exposes no spec-decode counters."""
        totals: dict[str, float] = {}
        per_pos: dict[int, float] = {}
        for name, labels, value in parse_prometheus(text):
            base = name.removesuffix("_total")
            if base == VLLM_ACCEPTED_PER_POS:
                pos = int(labels.get("position", "0"))
                per_pos[pos] = per_pos.get(pos, 0.0) + value
            elif base in (VLLM_NUM_DRAFTS, VLLM_NUM_DRAFT_TOKENS, VLLM_NUM_ACCEPTED):
                totals[base] = totals.get(base, 0.0) + value
        if VLLM_NUM_DRAFTS not in totals:
            return None
        positions = tuple(per_pos.get(i, 0.0) for i in range(max(per_pos, default=-1) + 1))
        return cls(
            totals[VLLM_NUM_DRAFTS],
            totals.get(VLLM_NUM_DRAFT_TOKENS, 0.0),
            totals.get(VLLM_NUM_ACCEPTED, 0.0),
            positions,
        )


@dataclass(frozen=True)
class SpecSummary:
    """Speculation over one measured run."""

    accept_length: float | None
    acceptance_by_position: list[float] | None
    source: str  # where the numbers came from, or why there are none


def vllm_delta(before: VllmSpecCounters, after: VllmSpecCounters) -> SpecSummary:
    """Accept length and per-position acceptance over the traffic between two scrapes."""
    drafts = after.num_drafts - before.num_drafts
    if drafts <= 0:
        return SpecSummary(None, None, "vllm /metrics: no drafts during the run")
    accepted = after.num_accepted_tokens - before.num_accepted_tokens
    n = max(len(before.accepted_per_pos), len(after.accepted_per_pos))
    by_pos = [(_at(after.accepted_per_pos, i) - _at(before.accepted_per_pos, i)) / drafts for i in range(n)]
    return SpecSummary(1.0 + accepted / drafts, by_pos or None, "vllm /metrics counter deltas")


def _at(values: tuple[float, ...], i: int) -> float:
    return values[i] if i < len(values) else 0.0


def sglang_meta_accept_length(metas: Iterable[Mapping[str, Any]]) -> float | None:
    """Accept length over finished ``/generate`` requests from their ``meta_info``.

    With ``spec_num_correct_drafts`` (accepted draft tokens) it is exact: 1 + correct / verify
    passes. Older servers only give ``completion_tokens``; each request's first token comes from
    the prefill, not a verify pass, so it is subtracted (SGLang's own completion/verify ratio
    counts it and over-states short outputs). None when no request reports ``spec_verify_ct``.
    """
    verify = correct = decode_tokens = 0.0
    exact = True
    any_meta = False
    for meta in metas:
        ct = meta.get("spec_verify_ct")
        if not isinstance(ct, (int, float)) or ct <= 0:
            continue
        any_meta = True
        verify += ct
        drafts = meta.get("spec_num_correct_drafts", meta.get("spec_accepted_drafts"))
        if isinstance(drafts, (int, float)):
            correct += drafts
        else:
            exact = False
        decode_tokens += max(float(meta.get("completion_tokens", 0)) - 1.0, 0.0)
    if not any_meta:
        return None
    return 1.0 + correct / verify if exact else decode_tokens / verify


def sglang_server_accept_length(server_info: Mapping[str, Any]) -> float | None:
    """The lifetime-cumulative ``avg_spec_accept_length`` of DP rank 0 (None if absent)."""
    states = server_info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        value = states[0].get(SGLANG_AVG_ACCEPT)
    else:
        value = server_info.get(SGLANG_AVG_ACCEPT)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None
