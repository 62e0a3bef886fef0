"""Accept lengths per slice of the data: the prompts' ``category`` and the context a cycle starts at.

Acceptance falls with context on several models, and agentic or code traffic accepts differently from
chat, so a mean over everything can hide the slice a deployment serves. A cycle belongs to the
context-length bucket of the tokens before its root: the prompt, the prefill's first token and the
tokens the earlier cycles committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# lower bounds of the context-length buckets, in tokens (the last bucket is open-ended)
CONTEXT_BUCKETS = (0, 256, 1024, 4096, 16384, 65536)
NO_CATEGORY = "(none)"


@dataclass(frozen=True)
class Cycles:
    """One prompt's cycles: its category, its length and each cycle's accept length (bonus included)."""

    category: str | None
    prompt_len: int
    accept_lengths: Sequence[int]


@dataclass(frozen=True)
class Slice:
    accept_length: float | None  # mean over the slice's cycles; None when it has none
    cycles: int
    prompts: int


def bucket_name(context: int) -> str:
    """The bucket ``context`` falls in, e.g. ``"256-1023"`` or ``"65536+"``."""
    lows = [b for b in CONTEXT_BUCKETS if b <= context]
    lo = lows[-1]
    i = CONTEXT_BUCKETS.index(lo)
    return f"{lo}+" if i + 1 == len(CONTEXT_BUCKETS) else f"{lo}-{CONTEXT_BUCKETS[i + 1] - 1}"


def slices(prompts: Sequence[Cycles]) -> dict[str, dict[str, Slice]]:
    """``{"category": {name: Slice}, "context": {bucket: Slice}}``, buckets in increasing order."""
    by: dict[str, dict[str, list[tuple[int, int]]]] = {"category": {}, "context": {}}  # name -> (prompt, length)
    for index, p in enumerate(prompts):
        by["category"].setdefault(p.category or NO_CATEGORY, [])
        context = p.prompt_len + 1  # the prefill commits the first token
        for length in p.accept_lengths:
            by["category"][p.category or NO_CATEGORY].append((index, length))
            by["context"].setdefault(bucket_name(context), []).append((index, length))
            context += length
    order = {name: i for i, name in enumerate(bucket_name(b) for b in CONTEXT_BUCKETS)}
    by["context"] = dict(sorted(by["context"].items(), key=lambda kv: order[kv[0]]))
    return {kind: {name: _slice(cycles, prompts, kind == "category" and name) for name, cycles in groups.items()}
            for kind, groups in by.items()}


def _slice(cycles: list[tuple[int, int]], prompts: Sequence[Cycles], category: str | bool) -> Slice:
    lengths = [n for _, n in cycles]
    members = ({i for i, p in enumerate(prompts) if (p.category or NO_CATEGORY) == category}
               if isinstance(category, str) else {i for i, _ in cycles})
    return Slice(sum(lengths) / len(lengths) if lengths else None, len(lengths), len(members))
