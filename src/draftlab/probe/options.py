"""What one probe run is asked for and what it runs on: built once at a public entry point
(:func:`~draftlab.probe.probe.probe`, ``probe_configs``, ``probe_sequences``, ``decode_continuations``)
and handed down, so the private steps take these two objects, not a dozen loose arguments."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from draftlab.checkpoint import TargetConfig
from draftlab.distributed import ONE, World
from draftlab.engines.sglang_flags import SpecFlags
from draftlab.errors import DraftlabError
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner

RESPONSES = ("generate", "given")


@dataclass(frozen=True)
class ProbeOptions:
    """The settings of one run, shared by every config it probes."""

    configs: tuple[SpecFlags, ...]  # probed over the same continuations and target passes
    max_new_tokens: int = 128  # tokens each walk must produce
    responses: str = "generate"  # "generate": the target's continuations; "given": the file's
    batch_size: int | None = None  # None: chosen from free memory once the continuations' length is known
    temperature: float = 0.0  # > 0: sampled continuations and the expected acceptance (an estimate)
    seed: int | None = None
    lookahead: int = 0  # continuations reach past max_new_tokens by at least this many tokens
    world: World = ONE  # under torchrun: which share of the prompts this rank decodes and probes

    @property
    def extra_tokens(self) -> int:
        """How far past ``max_new_tokens`` a continuation reaches: what the deepest draft (or the
        look-ahead) is checked against."""
        return max(self.lookahead, *(flags.steps for flags in self.configs))


@dataclass(frozen=True)
class ProbeModels:
    """The drafter, and the target: live (``runner``), or only its heads over captured features."""

    drafter: Eagle3Drafter
    runner: TargetRunner | None  # None: captured features supply the target's hidden states
    lm_head: torch.nn.Module
    eos: set[int]
    target_config: TargetConfig  # its vocabulary size reads the prompts; its context ends the walks

    @classmethod
    def live(cls, runner: TargetRunner, drafter: Eagle3Drafter, config: TargetConfig | None = None) -> ProbeModels:
        """A loaded target and its drafter; ``config`` defaults to the one the runner read."""
        return cls(drafter, runner, runner.lm_head, runner.eos_token_ids, config or runner.config)

    @property
    def context(self) -> int | None:
        return self.target_config.max_position_embeddings


def check_run(responses: str, max_new_tokens: int, batch_size: int | None) -> None:
    """Refuse settings no probe can run with, before anything loads."""
    if responses not in RESPONSES:
        raise DraftlabError(f"--responses must be one of {', '.join(RESPONSES)}, got {responses!r}")
    if max_new_tokens < 2:
        raise DraftlabError(f"--max-new-tokens must be >= 2 (the first token belongs to no cycle), "
                            f"got {max_new_tokens}")
    if batch_size is not None and batch_size < 1:
        raise DraftlabError(f"--batch-size must be >= 1, got {batch_size}")
