"""Load a target and its EAGLE-3 drafter together, capturing the aux layers the chosen engine would."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from draftlab.checkpoint import DrafterConfig, TargetConfig, open_checkpoint
from draftlab.engines import aux_layers
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.kernels import drafter_compile_chosen
from draftlab.models.target import TargetRunner


@dataclass
class LoadedPair:
    target: TargetRunner
    drafter: Eagle3Drafter
    aux_layers: list[int]  # canonical ids the target captures for this drafter


def load_pair(target: str | Path, drafter: str | Path, *, engine: str = "sglang", dtype: str = "float32",
              device: str = "cpu", device_map: str | None = None, cache: str = "auto",
              max_len: int | None = None, compile: bool = False) -> LoadedPair:
    """The target runner capturing ``engine``'s aux layers for ``drafter``, and the drafter sharing its embedding.

    The target goes on ``device``, or is split across the GPUs by ``device_map`` (then ``device`` is
    unused); the drafter always sits with the target's input embedding, which it shares.
    ``cache`` is the target's (``TargetRunner``: "auto" is static on one CUDA device for the families
    it supports, dynamic for a split target). When the target's cache is static the drafter's is too,
    so decoding runs at its fastest: both hold ``max_len`` entries (the target at most its context;
    default the target's own). ``compile``: the static target's bucketed steps compiled
    (:class:`~draftlab.models.target_static.StaticTarget`), and the drafter's where
    ``DRAFTLAB_DRAFTER=compiled`` asks for it (:func:`~draftlab.models.kernels.drafter_compile_chosen`).
    """
    target_cfg = TargetConfig.from_dict(open_checkpoint(target).config)
    drafter_cfg = DrafterConfig.from_dict(open_checkpoint(drafter).config)
    layers = aux_layers(engine, drafter_cfg, target_cfg.num_layers, target=target_cfg).layers
    runner = TargetRunner.load(target, aux_layers=layers, dtype=dtype, device=device, device_map=device_map,
                               cache=cache, max_len=max_len, compile=compile)
    draft_model = Eagle3Drafter.load(drafter, target=runner, dtype=dtype, device=str(runner.device))
    if runner.max_len is not None:
        draft_model.use_static_cache(max_len if max_len is not None else runner.max_len,
                                     compile=compile and drafter_compile_chosen())
    return LoadedPair(runner, draft_model, layers)
