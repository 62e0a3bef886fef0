"""Accept lengths per slice of the data: the prompts' ``category`` and the context a cycle starts at.

Acceptance falls with context on several models, and agentic or code traffic accepts differently from
chat, so a mean over everything can hide the slice a deployment serves. A cycle belongs to the context
bucket of its root's position (the last committed token, which its drafts extend; the number of tokens
before it), bucketed as ``probe``'s ``accept_length_by_context`` is (:mod:`draftlab.acceptance.by_context`)
with one first width for every candidate of a run (from its longest prompt plus ``max_new_tokens``), so their
columns line up. A probe's own curve takes its width from its furthest cycle: the same buckets unless its
continuations end short of that (an end of sequence), where its curve is finer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from draftlab.acceptance.by_context import bucket_label, bucket_of, first_width

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


def context_width(prompt_lens: Sequence[int], max_new_tokens: int) -> int:
    """The first context bucket's width for a run whose cycles start before its longest prompt plus
    ``max_new_tokens`` (every candidate's furthest root lies there)."""
    return first_width(max(prompt_lens, default=0) + max_new_tokens - 1)


def slices(prompts: Sequence[Cycles], width: int) -> dict[str, dict[str, Slice]]:
    """``{"category": {name: Slice}, "context": {bucket: Slice}}``, context buckets ``width`` wide first, then
    doubling (named as probe's), in increasing order."""
    by: dict[str, dict[str, list[tuple[int, int]]]] = {"category": {}, "context": {}}  # name -> (prompt, length)
    starts: dict[str, int] = {}
    for index, p in enumerate(prompts):
        by["category"].setdefault(p.category or NO_CATEGORY, [])
        position = p.prompt_len  # the first cycle's root: the prefill's token, after the prompt
        for length in p.accept_lengths:
            lo, hi = bucket_of(position, width)
            name = bucket_label({"from": lo, "to": hi})
            starts[name] = lo
            by["category"][p.category or NO_CATEGORY].append((index, length))
            by["context"].setdefault(name, []).append((index, length))
            position += length
    by["context"] = dict(sorted(by["context"].items(), key=lambda kv: starts[kv[0]]))
    return {kind: {name: _slice(cycles, prompts, kind == "category" and name) for name, cycles in groups.items()}
            for kind, groups in by.items()}


def _slice(cycles: list[tuple[int, int]], prompts: Sequence[Cycles], category: str | bool) -> Slice:
    lengths = [n for _, n in cycles]
    members = ({i for i, p in enumerate(prompts) if (p.category or NO_CATEGORY) == category}
               if isinstance(category, str) else {i for i, _ in cycles})
    return Slice(sum(lengths) / len(lengths) if lengths else None, len(lengths), len(members))
