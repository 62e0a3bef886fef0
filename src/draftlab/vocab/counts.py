"""Token-frequency files: ``{"vocab_size": V, "num_tokens": N, "counts": {"<id>": count}}``.

Extra keys record where the counts came from (data files, tokenizer, counting mode, skipped
lines). The order of ``counts`` is kept when read: ``vocab build`` breaks ties at its cut-off in
that order, as SpecForge's ``Counter.most_common`` breaks them in insertion order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from draftlab.checkpoint import read_json
from draftlab.errors import DraftlabError
from draftlab.fsutil import write_json_atomic


@dataclass
class TokenCounts:
    """How often each target token id occurs in the counted text (zero counts omitted)."""

    vocab_size: int
    counts: dict[int, int]  # token id -> count, in file / insertion order
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return sum(self.counts.values())

    def dense(self, vocab_size: int | None = None) -> np.ndarray:
        """Counts as an int64 array over ``vocab_size`` ids (default: this file's vocab_size)."""
        size = self.vocab_size if vocab_size is None else vocab_size
        out = np.zeros(size, dtype=np.int64)
        if self.counts:
            ids = np.fromiter(self.counts.keys(), dtype=np.int64, count=len(self.counts))
            out[ids] = np.fromiter(self.counts.values(), dtype=np.int64, count=len(self.counts))
        return out

    @classmethod
    def from_dense(cls, dense: np.ndarray, provenance: dict[str, Any] | None = None) -> TokenCounts:
        ids = np.flatnonzero(dense)
        return cls(int(dense.shape[0]), dict(zip(ids.tolist(), dense[ids].tolist())), provenance or {})

    def to_json(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size, "num_tokens": self.num_tokens,
                "counts": {str(k): v for k, v in self.counts.items()}, **self.provenance}

    def save(self, dest: str | Path) -> Path:
        write_json_atomic(dest, self.to_json())
        return Path(dest)

    def check_vocab(self, vocab_size: int, what: str, *, source: str | Path) -> None:
        """Refuse counts made for a different target vocabulary than ``what`` has."""
        if self.vocab_size != vocab_size:
            raise DraftlabError(
                f"counts are for a {self.vocab_size}-token vocabulary but {what} has {vocab_size}; "
                "count again with the target's tokenizer", path=source)


def read_counts(path: str | Path) -> TokenCounts:
    """Read and check a counts file; every problem is a one-line error naming the field."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise DraftlabError("a counts file must be a JSON object", path=path)
    vocab_size = data.get("vocab_size")
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size <= 0:
        raise DraftlabError(f"'vocab_size' must be a positive integer, got {vocab_size!r}", path=path)
    raw = data.get("counts")
    if not isinstance(raw, dict):
        raise DraftlabError("'counts' must be an object mapping token ids to counts", path=path)
    counts: dict[int, int] = {}
    for key, value in raw.items():
        try:
            token = int(key)
        except ValueError:
            raise DraftlabError(f"counts key {key!r} is not a token id", path=path) from None
        if not 0 <= token < vocab_size:
            raise DraftlabError(f"counts has token id {token}, outside the vocabulary [0, {vocab_size}); "
                                "the file is for another vocabulary", path=path)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise DraftlabError(f"counts[{key!r}] must be a non-negative integer, got {value!r}", path=path)
        if token in counts:
            raise DraftlabError(f"counts lists token id {token} twice", path=path)
        counts[token] = value
    provenance = {k: v for k, v in data.items() if k not in ("vocab_size", "num_tokens", "counts")}
    result = TokenCounts(vocab_size, counts, provenance)
    stated = data.get("num_tokens")
    if stated is not None and stated != result.num_tokens:
        raise DraftlabError(f"'num_tokens' is {stated} but the counts sum to {result.num_tokens}", path=path)
    return result
