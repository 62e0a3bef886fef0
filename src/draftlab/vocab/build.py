"""Build a draft vocabulary from token counts, by the rule SpecForge and EAGLE use.

SpecForge (``process_token_dict_to_mappings`` in ``specforge/data/preprocessing.py``):

1. the counts are a ``collections.Counter`` in insertion order;
2. when fewer than N distinct ids were counted, ids from ``set(range(N)) - seen`` are added at
   count 0, in that set's iteration order, until there are N;
3. ``most_common(N)``: descending count, ties in insertion order (the sort is stable);
4. the N ids are sorted ascending and encoded as ``d2t[i] = ids[i] - i``, ``t2d[id] = True``.

Step 2 iterates a Python set, so it is reproduced with the same set expression; step 3 is a
stable numpy sort, equivalent to ``most_common`` and fast at V = 200k.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from draftlab.errors import DraftlabError
from draftlab.fsutil import refuse_overlap
from draftlab.vocab.counts import TokenCounts, read_counts
from draftlab.vocab.mapping import MAPPING_FORMATS, VocabMapping


def select_draft_tokens(counts: Mapping[int, int], size: int) -> list[int]:
    """The ``size`` target ids SpecForge would keep for these counts, ascending."""
    if size <= 0:
        raise DraftlabError(f"draft vocabulary size must be positive, got {size}")
    keys = list(counts)
    values = list(counts.values())
    if len(keys) < size:
        need = size - len(keys)
        for token in set(range(size)) - set(keys):
            keys.append(token)
            values.append(0)
            need -= 1
            if need == 0:
                break
    order = np.argsort(-np.asarray(values, dtype=np.int64), kind="stable")[:size]
    return sorted(np.asarray(keys, dtype=np.int64)[order].tolist())


def build_mapping(counts: TokenCounts, size: int, vocab_size: int | None = None, *,
                  source: str | Path = "counts") -> VocabMapping:
    """The draft vocabulary of ``size`` tokens for ``counts`` (target vocabulary ``vocab_size``)."""
    vocab = counts.vocab_size if vocab_size is None else vocab_size
    if size > vocab:
        raise DraftlabError(f"--size {size} is larger than the {vocab}-token target vocabulary")
    largest = max(counts.counts, default=-1)
    if largest >= vocab:
        raise DraftlabError(f"holds token id {largest}, outside a {vocab}-token vocabulary; "
                            "pass the target's --vocab-size", path=source)
    return VocabMapping.from_target_ids(select_draft_tokens(counts.counts, size), vocab)


@dataclass(frozen=True)
class BuildResult:
    output: Path
    format: str
    draft_size: int
    vocab_size: int
    seen_tokens: int  # distinct ids with a non-zero count
    padded: int  # never-seen ids added to reach draft_size
    coverage: float  # share of counted tokens inside the new draft vocabulary


def build_mapping_file(counts_path: str | Path, size: int, output: str | Path,
                       vocab_size: int | None = None, fmt: str | None = None) -> BuildResult:
    """Read counts, build the mapping and write it atomically (format from ``fmt`` or the suffix)."""
    output = Path(output)
    refuse_overlap(output, {"--counts": counts_path})
    fmt = fmt or ("pt" if output.suffix == ".pt" else "safetensors")
    if fmt not in MAPPING_FORMATS:
        raise DraftlabError(f"unknown --format {fmt!r}; choose one of {', '.join(MAPPING_FORMATS)}")
    counts = read_counts(counts_path)
    mapping = build_mapping(counts, size, vocab_size, source=counts_path)
    mapping.save(output, fmt)
    dense = counts.dense(mapping.vocab_size)
    total = int(dense.sum())
    seen = sum(1 for v in counts.counts.values() if v > 0)
    inside = int(dense[mapping.t2d].sum())
    return BuildResult(output, fmt, size, mapping.vocab_size, seen, max(0, size - len(counts.counts)),
                       inside / total if total else 0.0)
