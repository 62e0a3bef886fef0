"""Which engine release a command computes for: ``--engine``, ``--engine-version`` and ``--draft-window``,
spelled once here and handed to each command as one :class:`EngineChoice` (:func:`engine_choice`), which the
command resolves against its pair into the one :class:`~draftlab.engines.deployment.Deployment` it computes
from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from draftlab.cli.checks import at_least_one
from draftlab.cli.groups import OptionGroup, option

if TYPE_CHECKING:
    from draftlab.engines.deployment import Deployment

EngineOption = Annotated[str, typer.Option(
    "--engine", help="Whose aux-layer convention to read from the drafter config: sglang or vllm.")]
# check and inspect: with a short flag
ShortEngineOption = Annotated[str, typer.Option("--engine", "-e", help="sglang or vllm: whose loading rules apply.")]
EngineVersionOption = Annotated[Optional[str], typer.Option(
    "--engine-version", help="The engine release whose rules apply: any version resolves to the newest release "
    "draftlab knows at or below it (default: the newest; the README lists them).")]
# launch: the release installed where the engine runs
InstalledVersionOption = Annotated[Optional[str], typer.Option(
    "--engine-version", help="The installed engine's release: its rules check the pair (any version resolves to "
    "the newest release draftlab knows at or below it; default: the newest).")]
DraftWindowOption = Annotated[Optional[int], typer.Option(
    "--draft-window", callback=at_least_one, help="The drafter attends to the last W positions, as SGLang serves "
    "it when launched with --speculative-draft-window-size W (SGLang only: vLLM reads the window from the "
    "drafter's config). Default: what the engine serves without it.")]


@dataclass(frozen=True)
class EngineChoice:
    """The engine, release and SGLang draft window a command was asked to compute for."""

    engine: str
    version: str | None = None
    draft_window: int | None = None

    @classmethod
    def of(cls, engine: str, engine_version: str | None = None, draft_window: int | None = None) -> EngineChoice:
        """The choice as given, its engine and release checked before any work (an unknown or empty one is
        refused in one line)."""
        from draftlab.engines.releases import release

        release(engine, engine_version)
        return cls(engine, engine_version, draft_window)

    def resolve(self, target: str | Path, drafter: str | Path) -> Deployment:
        """What this release runs for the drafter folder on the target folder (from their configs), once
        ``check`` finds no error in the pair for it: a pair the engine or the runtime would fail on, or serve
        as another function, is refused in one line before any work (:mod:`draftlab.compat.loadable`)."""
        from draftlab.compat.loadable import refuse_unloadable
        from draftlab.models.pair import deployment_for

        deployment = deployment_for(target, drafter, self.engine, self.version, self.draft_window)
        refuse_unloadable(Path(drafter), Path(target), deployment)
        return deployment

    def describe(self) -> dict[str, Any]:
        """The engine fields of a result computed with no drafter (nothing captured for one)."""
        from draftlab.engines.releases import release

        return {"engine": self.engine, "engine_version": release(self.engine, self.version).version,
                "engine_version_asked": self.version, "captured_layers": None}


def engine_choice(*, version: bool = True, window: bool = True) -> OptionGroup:
    """``--engine`` (default sglang), with ``version`` ``--engine-version`` and with ``window`` ``--draft-window``,
    as one :class:`EngineChoice` (``asked: EngineChoice = engine_choice()`` under
    :func:`~draftlab.cli.groups.grouped`)."""
    options = [option("engine", EngineOption, "sglang")]
    if version:
        options.append(option("engine_version", EngineVersionOption))
    if window:
        options.append(option("draft_window", DraftWindowOption))
    return OptionGroup(tuple(options), EngineChoice.of)
