"""A plan's predictions beside a sweep's measurements: the tok/s ``plan --json`` predicted per entry.

The plan gives tokens per second per (config, batch size) and the baseline per batch size; a sweep
entry at concurrency B with the same config is its measurement (the bench's output throughput over
all B requests in flight is the plan's batch-B throughput). A schedule entry is predicted as the
config its schedule runs at batch B (the baseline where it says 0). A plan made with ``--served`` also
predicts ``draftlab serve`` itself (``served_*``); a sweep of the batching reference server compares with those.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from draftlab import jsonio
from draftlab.errors import DraftlabError


@dataclass(frozen=True)
class Predictions:
    """tok/s by (batch, steps, topk, num_draft_tokens); steps 0 is the baseline."""

    tokens_per_second: dict[tuple[int, int, int, int], float]
    served: Predictions | None = None  # the plan's draftlab serve predictions (plan --served), when it has them

    def at(self, batch: int, steps: int, topk: int, num_draft_tokens: int) -> float | None:
        return self.tokens_per_second.get((batch, steps, topk, num_draft_tokens))

    def chain(self, batch: int, k: int) -> float | None:
        """A chain of ``k`` drafts at ``batch`` (0: the baseline)."""
        return self.at(batch, k, 1, k + 1) if k else self.at(batch, 0, 0, 0)


def load_predictions(path: str | Path) -> Predictions:
    """Read ``draftlab plan --json`` output; DraftlabError if it is not one."""
    doc = jsonio.read(path, "no such file; write one with draftlab plan ... --json > FILE", option="--predicted")
    try:
        table = _table(doc, "baseline_tokens_per_second", "tokens_per_second")
        served = None
        if doc.get("served_baseline_tokens_per_second") is not None:
            served = Predictions(_table(doc, "served_baseline_tokens_per_second", "served_tokens_per_second"))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise DraftlabError("--predicted: not a plan (expected draftlab plan --json output with "
                            "baseline_tokens_per_second and configs)", path=path) from None
    return Predictions(table, served)


def _table(doc: dict, baseline: str, rate: str) -> dict[tuple[int, int, int, int], float]:
    table = {(int(b), 0, 0, 0): float(v) for b, v in doc[baseline].items()}
    for r in doc["configs"]:
        table[(int(r["batch_size"]), int(r["steps"]), int(r["topk"]), int(r["num_draft_tokens"]))] = float(r[rate])
    return table
