"""The target's own MTP head as a candidate beside the drafter in ``assess``: whether the release serves it for
this target (:mod:`draftlab.engines.mtp`'s rules), which of the grid's configs it drafts there, and the head
loaded over the pair's target model (no second copy of the target's weights)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from draftlab.checkpoint import open_checkpoint
from draftlab.cost.model import SpecConfig
from draftlab.engines.mtp import MtpSupport, target_support, vllm_mtp_config
from draftlab.engines.mtp_head import MtpServing
from draftlab.errors import DraftlabError
from draftlab.models.mtp import MtpDrafter, mtp_layout
from draftlab.models.target import TargetRunner


@dataclass(frozen=True)
class MtpCandidate:
    """The head as the release serves it, and the grid configs it drafts with it."""

    serving: MtpServing
    configs: list[SpecConfig]
    source: str  # the engine file that serves it


def mtp_candidate(target: str | Path, engine: str, version: str | None, configs: list[SpecConfig]
                  ) -> tuple[MtpCandidate | None, str | None]:
    """The candidate, or None with why not when the target is of a family that ships MTP layers (None and
    None for any other target: nothing to say)."""
    support = target_support(target, engine, version)
    if support is None or support.family is None:
        return None, None
    if not support.served:
        return None, f"{support.why_not} ({support.source})"
    ckpt = open_checkpoint(target)
    try:
        mtp_layout(ckpt.config, set(ckpt.tensors), ckpt.path)
    except DraftlabError as exc:  # a layout draftlab does not compute (MiMo's)
        return None, str(exc)
    drafted = [c for c in configs if _drafts(c, support)]
    if not drafted:
        return None, (f"{support.name} drafts with the MTP head as a chain ({support.source}) and the grid has no "
                      "chain it serves; add one, e.g. --grid 3/1/4")
    return MtpCandidate(MtpServing(engine, version), drafted, support.source), None


def _drafts(config: SpecConfig, support: MtpSupport) -> bool:
    """Whether the release drafts ``config`` with the head: a tree only where it serves trees, a chain length
    vLLM accepts for the MTP layers it reuses."""
    if config.topk > 1 and not support.trees:
        return False
    if support.engine == "vllm":
        try:
            vllm_mtp_config(config.steps, support)
        except DraftlabError:
            return False
    return True


def load_head(runner: TargetRunner, target: str | Path, engine: str) -> tuple[TargetRunner, MtpDrafter]:
    """A runner over ``runner``'s own model handing out the final hidden state, and the MTP head of the
    checkpoint ``target`` as ``engine`` computes it on it."""
    final = TargetRunner(runner.model, final_hidden=True)
    return final, MtpDrafter.load(target, final, engine)
