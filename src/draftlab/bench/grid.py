"""The sweep grid: ``"1,0,0,0 1,3,1,4 4,3,1,4"`` -> one entry per ``batch,steps,topk,num_draft_tokens``.

``B,0,0,0`` is the baseline (no drafter) at batch B. Every speculative entry must be what SGLang
runs as written (``exact_spec_flags``): a flag SGLang would silently rewrite is refused, so the
numbers in a sweep always belong to the flags shown next to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.errors import DraftlabError

GRID_HELP = 'space-separated batch,steps,topk,num_draft_tokens entries, e.g. "1,0,0,0 1,3,1,4"; B,0,0,0 is the baseline'


@dataclass(frozen=True)
class SweepEntry:
    """One configuration of a sweep; steps 0 (with topk 0, num_draft_tokens 0) is the baseline."""

    batch: int  # the bench client's concurrency: requests kept in flight
    steps: int
    topk: int
    num_draft_tokens: int
    schedule: bool = False  # drafts per batch size as the sweep's --schedule says (steps: its largest K)

    @property
    def is_baseline(self) -> bool:
        return self.steps == 0

    @property
    def label(self) -> str:
        """The configuration without the batch: ``baseline``, ``schedule`` or ``3/1/4`` (steps/topk/draft tokens)."""
        if self.schedule:
            return "schedule"
        return "baseline" if self.is_baseline else f"{self.steps}/{self.topk}/{self.num_draft_tokens}"

    @property
    def text(self) -> str:
        """The entry as written in a grid: ``batch,steps,topk,num_draft_tokens``."""
        return f"{self.batch},{self.steps},{self.topk},{self.num_draft_tokens}"

    @property
    def slug(self) -> str:
        """A file-name-safe name, unique within a grid: ``b1-baseline``, ``b4-s3-k1-n4``."""
        shape = ("schedule" if self.schedule else "baseline" if self.is_baseline
                 else f"s{self.steps}-k{self.topk}-n{self.num_draft_tokens}")
        return f"b{self.batch}-{shape}"


def parse_grid(text: str) -> list[SweepEntry]:
    """Parse and check every entry; the first bad one raises DraftlabError naming it."""
    entries: list[SweepEntry] = []
    for position, raw in enumerate(text.split(), start=1):
        entry = _parse_entry(raw, position)
        if entry in entries:
            raise DraftlabError(f"--grid entry {position} {raw!r} repeats an earlier entry; list each configuration once")
        entries.append(entry)
    if not entries:
        raise DraftlabError(f"--grid is empty; give {GRID_HELP}")
    return entries


def _parse_entry(raw: str, position: int) -> SweepEntry:
    where = f"--grid entry {position} {raw!r}"
    parts = raw.split(",")
    if len(parts) != 4:
        raise DraftlabError(f"{where} has {len(parts)} field(s); write batch,steps,topk,num_draft_tokens (4 integers)")
    try:
        batch, steps, topk, ndt = (int(p) for p in parts)
    except ValueError:
        raise DraftlabError(f"{where}: every field must be an integer (batch,steps,topk,num_draft_tokens)") from None
    if batch < 1:
        raise DraftlabError(f"{where}: batch must be at least 1 (got {batch})")
    if steps == 0:
        if (topk, ndt) != (0, 0):
            raise DraftlabError(f"{where}: steps 0 is the baseline; write {batch},0,0,0")
        return SweepEntry(batch, 0, 0, 0)
    try:
        exact_spec_flags(steps, topk, ndt)
    except DraftlabError as exc:
        raise DraftlabError(f"{where}: {exc}") from None
    return SweepEntry(batch, steps, topk, ndt)
