"""Load a target and its EAGLE-3 drafter together, capturing the aux layers one engine release would."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from draftlab.checkpoint import DrafterConfig, TargetConfig, open_checkpoint
from draftlab.engines.deployment import Deployment
from draftlab.models.devices import model_devices
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.kernels import drafter_compile_chosen
from draftlab.models.target import TargetRunner, static_by_default, static_len

# the engine fields (Deployment.describe()'s) of a result computed without a drafter: nothing captured for one
NO_DEPLOYMENT = {"engine": None, "engine_version": None, "captured_layers": None}


@dataclass
class LoadedPair:
    target: TargetRunner
    drafter: Eagle3Drafter
    aux_layers: list[int]  # canonical ids the target captures for this drafter
    deployment: Deployment  # the release whose rules chose them (and the drafter's served window)


def deployment_for(target: str | Path, drafter: str | Path, engine: str = "sglang", version: str | None = None,
                   draft_window: int | None = None) -> Deployment:
    """The deployment of the drafter folder ``drafter`` on the target folder ``target`` by ``engine`` at
    ``version`` (None: the newest known), from their configs alone."""
    return Deployment.resolve(engine, version, DrafterConfig.from_dict(open_checkpoint(drafter).config),
                              TargetConfig.from_dict(open_checkpoint(target).config), draft_window)


def load_pair(target: str | Path, drafter: str | Path, deployment: Deployment | None = None, *,
              dtype: str = "float32", device: str = "cpu", device_map: str | None = None, cache: str = "auto",
              max_len: int | None = None, compile: bool = False) -> LoadedPair:
    """The target runner capturing ``deployment``'s aux layers (default: the newest SGLang's) for ``drafter``,
    and the drafter sharing its embedding.

    The target goes on ``device``, or is split across the GPUs by ``device_map`` (then ``device`` is
    unused); the drafter always sits with the target's input embedding, which it shares.
    ``cache`` is the target's (``TargetRunner``: "auto" is static on one CUDA device for the families
    it supports, dynamic for a split target). The drafter's is static wherever the target's is, and under
    "auto" also beside a dynamic target on one CUDA device (a family the static runtime lacks, such as
    DeepSeek's): its one layer replays as CUDA graphs whatever the target runs, so decoding one prompt
    runs at its fastest. It holds ``max_len`` entries (default the target's own, else what a static
    target would hold). ``compile``: the static target's bucketed steps compiled
    (:class:`~draftlab.models.target_static.StaticTarget`), and the drafter's where
    ``DRAFTLAB_DRAFTER=compiled`` asks for it (:func:`~draftlab.models.kernels.drafter_compile_chosen`).
    """
    deployment = deployment or deployment_for(target, drafter)
    layers = list(deployment.aux.layers)
    runner = TargetRunner.load(target, aux_layers=layers, dtype=dtype, device=device, device_map=device_map,
                               cache=cache, max_len=max_len, compile=compile)
    draft_model = Eagle3Drafter.load(drafter, target=runner, dtype=dtype, device=str(runner.device),
                                     windows=deployment.windows)
    drafter_len = _drafter_cache_len(runner, cache, max_len)
    if drafter_len is not None:
        draft_model.use_static_cache(drafter_len, compile=compile and drafter_compile_chosen())
    return LoadedPair(runner, draft_model, layers, deployment)


def _drafter_cache_len(runner: TargetRunner, cache: str, max_len: int | None) -> int | None:
    """Entries of the drafter's static cache beside ``runner`` loaded with ``cache``; None: dynamic."""
    if runner.max_len is not None:
        return max_len if max_len is not None else runner.max_len
    if cache != "auto" or not static_by_default(runner.device) or len(model_devices(runner.model)) > 1:
        return None
    return static_len(runner.config.max_position_embeddings, max_len)
