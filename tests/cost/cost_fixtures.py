"""Helpers: a made-up profile whose predictions the tests compute by hand."""

from __future__ import annotations

import json
from pathlib import Path

from draftlab.cost.profile import FORMAT


def point(batch_size: int, tokens: int, ms: float) -> dict:
    return {"batch_size": batch_size, "tokens": tokens, "median_ms": ms, "p10_ms": ms,
            "p90_ms": ms, "min_ms": ms, "max_ms": ms, "repeats": 5}


def profile_doc(*, allreduce: bool = False) -> dict:
    """Verify 10/12/16 ms at batch 1 (1/4/8 tokens), 14/30/50 ms at batch 8; drafter passes;
    0.5 ms overhead; optionally 4 all-reduces per forward of 0.5/1.0/1.5 ms at batch 1."""
    doc = {
        "format": FORMAT,
        "model": {"target": "toy", "model_type": "llama", "hidden_size": 64, "num_layers": 2,
                  "vocab_size": 256, "dtype": "float32"},
        "verify": [point(1, 1, 10.0), point(1, 4, 12.0), point(1, 8, 16.0),
                   point(8, 1, 14.0), point(8, 4, 30.0), point(8, 8, 50.0)],
        "draft_step": [point(1, 1, 1.0), point(1, 4, 1.5), point(8, 1, 1.2), point(8, 4, 3.0)],
        "draft_extend": [point(1, 1, 2.0), point(1, 4, 2.6), point(8, 1, 2.5), point(8, 4, 4.0)],
        "allreduce": None,
        "overhead_ms": 0.5,
    }
    if allreduce:
        doc["verify"] = doc["verify"][:3]
        doc["draft_step"] = doc["draft_step"][:2]
        doc["draft_extend"] = doc["draft_extend"][:2]
        doc["allreduce"] = {"tp": 2, "backend": "gloo", "dtype": "float32", "hidden_size": 64,
                            "calls_per_forward": 4,
                            "points": [point(1, 1, 0.5), point(1, 4, 1.0), point(1, 8, 1.5)]}
    return doc


def write_json(path: Path, obj: object) -> Path:
    path.write_text(json.dumps(obj))
    return path
