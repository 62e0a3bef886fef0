"""A made-up GPU-like profile for the toy target's shape, so verdicts do not hang on CPU timing noise."""

from __future__ import annotations

from pathlib import Path

from draftlab.cost.profile import FORMAT


def point(batch_size: int, tokens: int, ms: float) -> dict:
    return {"batch_size": batch_size, "tokens": tokens, "median_ms": ms, "p10_ms": ms, "p90_ms": ms,
            "min_ms": ms, "max_ms": ms, "repeats": 5}


def toy_profile(path: Path, *, verify_ms: float = 10.0, per_token_ms: float = 0.05, draft_ms: float = 0.6,
                mtp_ms: float | None = None) -> Path:
    """Verify ``verify_ms + per_token_ms * tokens`` at batch 1 (8x the slope at batch 8), a drafter pass
    of ``draft_ms``: a memory-bound target, where a decent accept length pays. ``mtp_ms``: the target's own
    MTP head's passes too, shaped like the drafter's."""
    import json

    from draftlab.toy.pair import HIDDEN, LAYERS
    from draftlab.toy.tokenizer import VOCAB_SIZE

    doc = {
        "format": FORMAT,
        "model": {"target": "toy", "model_type": "llama", "hidden_size": HIDDEN, "num_layers": LAYERS,
                  "vocab_size": VOCAB_SIZE, "dtype": "float32"},
        "verify": [point(b, t, verify_ms + per_token_ms * t * (1 if b == 1 else 8)) for b in (1, 8) for t in range(1, 34)],
        "draft_step": [point(b, r, draft_ms * (1 if b == 1 else 1.5)) for b in (1, 8) for r in (1, 4, 8)],
        "draft_extend": [point(b, t, draft_ms * 1.2 * (1 if b == 1 else 1.5)) for b in (1, 8) for t in range(1, 8)],
        "allreduce": None,
        "overhead_ms": 0.3,
    }
    if mtp_ms is not None:
        doc["mtp_draft_step"] = [point(b, r, mtp_ms * (1 if b == 1 else 1.5)) for b in (1, 8) for r in (1, 4, 8)]
        doc["mtp_draft_extend"] = [point(b, t, mtp_ms * 1.2 * (1 if b == 1 else 1.5)) for b in (1, 8)
                                   for t in range(1, 8)]
    path.write_text(json.dumps(doc))
    return path


def noisy_profile(costs: Path, path: Path) -> Path:
    """``costs`` with a 1-token verify at batch 1 measured slower than a 5-token one (the issue's 64.5 ms
    against 13.2 ms): timings that contradict each other, written to ``path``."""
    import json

    doc = json.loads(costs.read_text())
    for point in doc["verify"]:
        if point["tokens"] == 1 and point["batch_size"] == 1:
            point.update(median_ms=64.5, p10_ms=1.8, p90_ms=144.8)
    path.write_text(json.dumps(doc))
    return path
