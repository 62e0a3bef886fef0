"""Load a target and its EAGLE-3 drafter together, capturing the aux layers the chosen engine would."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from draftlab.checkpoint import DrafterConfig, TargetConfig, open_checkpoint
from draftlab.engines import aux_layers
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner


@dataclass
class LoadedPair:
    target: TargetRunner
    drafter: Eagle3Drafter
    aux_layers: list[int]  # canonical ids the target captures for this drafter


def load_pair(target: str | Path, drafter: str | Path, *, engine: str = "sglang", dtype: str = "float32",
              device: str = "cpu", cache: str = "auto") -> LoadedPair:
    """The target runner capturing ``engine``'s aux layers for ``drafter``, and the drafter sharing its embedding."""
    target_cfg = TargetConfig.from_dict(open_checkpoint(target).config)
    drafter_cfg = DrafterConfig.from_dict(open_checkpoint(drafter).config)
    layers = aux_layers(engine, drafter_cfg, target_cfg.num_layers).layers
    runner = TargetRunner.load(target, aux_layers=layers, dtype=dtype, device=device, cache=cache)
    return LoadedPair(runner, Eagle3Drafter.load(drafter, target=runner, dtype=dtype, device=device), layers)
