"""One resolved deployment: what one release of one engine will run for one drafter on one target.

Every command that runs or reports on a drafter builds this once from ``--engine``, ``--engine-version``
and (SGLang) ``--draft-window``, and computes from it, so a check and a probe of the same pair and release
name the same captured layers by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from draftlab.checkpoint.configs import DrafterConfig, TargetConfig
from draftlab.engines.aux_ids import AuxLayers, aux_layers, runner_of
from draftlab.engines.releases import Release, release
from draftlab.engines.window import served_windows


@dataclass(frozen=True)
class Deployment:
    """What ``release`` runs for this pair: the aux layers it captures, the vLLM runner, the drafter's
    attention window per layer, and whether it serves the target's family at all."""

    release: Release
    asked_version: str | None  # as the user wrote it (None: the newest known)
    aux: AuxLayers
    runner: str | None  # vLLM "V1" | "MRV2"; None for SGLang
    windows: tuple[int | None, ...]  # served, per drafter layer (None: full attention)
    trained_windows: tuple[int | None, ...]  # as the drafter's config states them
    draft_window: int | None  # SGLang's --speculative-draft-window-size, as given
    unserved_because: str | None  # why this release serves no EAGLE-3 on the target (None: it does)

    @classmethod
    def resolve(cls, engine: str, version: str | None, drafter: DrafterConfig, target: TargetConfig,
                draft_window: int | None = None) -> Deployment:
        """The deployment of ``drafter`` on ``target`` by ``engine`` at ``version`` (None: the newest known)."""
        rel = release(engine, version)
        runner = runner_of(rel, target)
        return cls(
            release=rel, asked_version=version,
            aux=aux_layers(engine, drafter, target.num_layers, target=target, version=rel.version, runner=runner),
            runner=runner, windows=served_windows(rel, drafter, draft_window),
            trained_windows=drafter.layer_windows or (None,) * drafter.num_layers, draft_window=draft_window,
            unserved_because=rel.unserved_because(target.model_type),
        )

    @property
    def engine(self) -> str:
        return self.release.engine

    @property
    def version(self) -> str:
        """The known release whose rules apply."""
        return self.release.version

    def describe(self) -> dict[str, Any]:
        """The fields every result's JSON carries: which engine and release, and what it captures and runs."""
        return {"engine": self.engine, "engine_version": self.version, "engine_version_asked": self.asked_version,
                "captured_layers": list(self.aux.layers), "aux_rule": self.aux.rule, "runner": self.runner,
                "draft_windows": list(self.windows)}
