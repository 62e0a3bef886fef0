"""Synthetic acceptance: forcing a requested acceptance instead of verifying drafts.

Every engine can replace its accept test with a draw, so a system can be measured at a chosen
accept length before any drafter is trained ("is my drafter bad, or my system?"). The request is an
acceptance profile (per-position marginals, ``probe --profile-out``) or a mean accept length (AL,
bonus included). This module holds the engine-neutral request and the forcing rule
``draftlab serve`` runs; what each engine takes is in :mod:`draftlab.engines.synthetic`.

The rule is vLLM's (``rejection_sample_method: "synthetic"``, 0.20.0+, PR #40662;
``vllm/config/speculative.py`` ``SpeculativeConfig._acceptance_length_to_rates`` and
``vllm/v1/spec_decode`` ``unconditional_to_conditional_rates``): marginals m_i = P(the first i + 1
drafts are all accepted); draft i is accepted with the conditional probability m_i / m_{i-1} given
that the drafts before it were, one uniform draw per request and position, and the chain stops at
the first rejection. A bare AL becomes marginals by vLLM's minimum-variance schedule
``[1] * floor(AL - 1) + [frac(AL - 1)] + [0] * ...``, so its accept length takes two values.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draftlab.acceptance.profile import conditional_rates, read_profile
from draftlab.errors import DraftlabError

OPTION = "--synthetic-acceptance"


@dataclass(frozen=True)
class SyntheticAcceptance:
    """A requested acceptance: a profile's marginals (``profile`` set) or a mean accept length."""

    source: str  # what was given: the number, or the profile's path
    accept_length: float | None = None  # given as an AL (bonus included)
    marginals: tuple[float, ...] | None = None  # given as a profile: P(first i + 1 accepted), i = 0..K-1
    profile: str | None = None  # the profile's path

    def marginals_for(self, steps: int) -> list[float]:
        """The marginals of a chain of ``steps`` drafts: the profile's first ``steps`` (refused when it has
        fewer), or vLLM's minimum-variance schedule for a bare AL (refused above steps + 1)."""
        if self.marginals is None:
            length = self.accept_length_for(steps)
            full = int(length - 1)
            return ([1.0] * full + [length - 1 - full] + [0.0] * steps)[:steps]
        if steps > len(self.marginals):
            raise DraftlabError(f"{OPTION} {self.source}: the profile has {len(self.marginals)} draft positions but "
                                f"the run drafts {steps}; profile a longer chain or draft fewer (--steps "
                                f"{len(self.marginals)})")
        return list(self.marginals[:steps])

    def accept_length_for(self, steps: int) -> float:
        """The mean accept length a chain of ``steps`` drafts gets: the AL itself, or 1 + sum of the marginals."""
        if self.marginals is not None:
            return 1.0 + sum(self.marginals_for(steps))
        assert self.accept_length is not None
        if self.accept_length > steps + 1:
            raise DraftlabError(f"{OPTION} {self.source}: an accept length above steps + 1 = {steps + 1} cannot "
                                f"happen with {steps} drafts; ask for at most {steps + 1} or draft more")
        return self.accept_length

    def record(self, steps: int | None = None) -> dict[str, Any]:
        """What a result records about the run: that it was synthetic, what was asked, and (with ``steps``)
        the accept length and marginals that run was forced to."""
        marginals = None if self.marginals is None else list(self.marginals)
        out: dict[str, Any] = {"synthetic": True, "requested": self.source, "profile": self.profile,
                               "requested_accept_length": self.accept_length,
                               "requested_marginal_accept_rates": marginals}
        if steps is not None:
            out.update(steps=steps, accept_length=self.accept_length_for(steps),
                       marginal_accept_rates=self.marginals_for(steps))
        return out


def parse_synthetic(text: str) -> SyntheticAcceptance:
    """Read ``--synthetic-acceptance``: a number is a mean accept length (>= 1), anything else a profile file."""
    try:
        value = float(text)
    except ValueError:
        path = Path(text)
        profile = read_profile(path)
        return SyntheticAcceptance(text, marginals=tuple(float(m) for m in profile.marginal_accept_rates),
                                   profile=str(path))
    if not math.isfinite(value) or value < 1:
        raise DraftlabError(f"{OPTION} {text}: an accept length is a finite number >= 1 (the bonus token counts)")
    return SyntheticAcceptance(text, accept_length=value)


def accepted_drafts(conditionals: Sequence[float], rng: random.Random) -> int:
    """How many drafts one cycle accepts: draft i with probability ``conditionals[i]`` while all before it were."""
    for i, c in enumerate(conditionals):
        if not rng.random() < c:
            return i
    return len(conditionals)


def forced_conditionals(synthetic: SyntheticAcceptance, steps: int) -> list[float]:
    """The per-position conditional rates a chain of ``steps`` drafts is forced with."""
    return conditional_rates(synthetic.marginals_for(steps))
