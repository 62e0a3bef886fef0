"""Per-position acceptance profiles in ModelOpt's draft ``speculation_profile.json`` schema.

The schema is NVIDIA Model-Optimizer's (``SCHEMA_VERSION = "1.0"``, ``build_profile`` in
``examples/specdec_bench/specdec_bench/speculation_profile.py`` at commit ``edf879d3``; PRs #2247,
#2313, #2315, #2316, still open, so field names may change; ../shared/reference/engine-interop.md
section 5). Its conventions, which every function here follows:

- the accept length (AL) counts the bonus token; the histogram is keyed by ``str(AL)``;
- ``marginal_accept_rates[i]`` = P(the first i + 1 drafts are all accepted) = P(AL >= i + 2), the
  survival function of the histogram, rounded to 6 decimals; ``conditional_accept_rates[i]`` =
  marginal[i] / marginal[i - 1] (marginal[-1] = 1; 0 where the denominator is 0);
- ``mean_accept_length`` is the per-step mean (over verify cycles, the figure the engines and
  ``draftlab probe`` report); ``mean_accept_length_per_request`` the mean of per-request means;
- ``validation``: ``mean_consistency`` (|1 + sum(marginals) - mean| <= 0.02) and
  ``marginal_monotonicity`` (non-increasing, with 1e-9 slack). ModelOpt records a failure; draftlab
  refuses to write or read such a file (:func:`check_profile`), since every consumer of the vectors
  (vLLM's ``synthetic_acceptance_rates``, the planner) needs them to hold.

draftlab adds ``speculation_config`` (the probed ``steps``/``topk``/``num_draft_tokens``), which
:func:`accept_length_for` uses to map the profile onto other configs, and fills ``per_category``
with the same figures per prompt ``category``. Torch-free: ``plan --profile`` reads it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftlab import jsonio
from draftlab.documents import document
from draftlab.errors import DraftlabError
from draftlab.fsutil import write_json_atomic

SCHEMA_VERSION = "1.0"
MEAN_TOLERANCE = 0.02  # ModelOpt's mean_consistency tolerance
PRODUCER = "draftlab probe"  # who writes profiles (the probe; assess through it)
MONOTONE_SLACK = 1e-9  # ModelOpt's marginal_monotonicity slack
DECIMALS = 6  # ModelOpt rounds the rate vectors to 6 decimals


@dataclass(frozen=True)
class AcceptanceProfile:
    """One ``speculation_profile.json``: ModelOpt's fields, plus draftlab's ``speculation_config``."""

    num_speculative_tokens: int  # K: the vectors' length (a tree's depth, its steps)
    conditional_accept_rates: list[float]
    marginal_accept_rates: list[float]
    mean_accept_length: float
    schema_version: str = SCHEMA_VERSION
    measured: bool = True
    method: str | None = "eagle3"
    draft_checkpoint: dict[str, Any] | None = None
    target_model: dict[str, Any] | None = None
    block_size: int | None = None
    max_supported_k: int | None = None
    verification_method: str = "longest_prefix"
    mean_accept_length_per_request: float | None = None
    accept_length_model: str | None = None  # "chain_analytic" | "measured_per_k"
    accept_length_by_k: dict[str, float] = field(default_factory=dict)
    acceptance_length_histogram: dict[str, float] = field(default_factory=dict)
    per_category: dict[str, dict[str, Any]] | None = None
    measurement_conditions: dict[str, Any] | None = None
    validation: dict[str, Any] = field(default_factory=dict)
    producer: str | None = PRODUCER
    speculation_config: dict[str, int] | None = None  # draftlab: steps, topk, num_draft_tokens

    @property
    def is_chain(self) -> bool:
        """Whether the vectors describe a chain (a tree's per-depth figures do not extend to other shapes)."""
        if self.speculation_config is not None:
            return self.speculation_config.get("topk") == 1
        return self.accept_length_model == "chain_analytic"


# --- building ----------------------------------------------------------------------------------


def rates_from_histogram(histogram: Sequence[float], k: int) -> tuple[list[float], list[float]]:
    """(marginal, conditional) rates of K positions from a histogram indexed by accept length.

    Draft position i maps to accept length i + 2; the marginal is the survival P(AL >= i + 2)
    (positions the histogram does not reach are 0), the conditional its ratio to the previous one.
    """
    total = float(sum(histogram))
    if total <= 0:
        raise DraftlabError("the probe measured no verify cycle, so there is no acceptance to profile; "
                            "give prompts with room for a continuation")
    marginal = [sum(histogram[i + 2:]) / total for i in range(k)]
    return [round(m, DECIMALS) for m in marginal], [round(c, DECIMALS) for c in conditional_rates(marginal)]


def conditional_rates(marginal: Sequence[float]) -> list[float]:
    """c_i = m_i / m_{i-1} (m_{-1} = 1; 0 where m_{i-1} is 0), as vLLM's ``unconditional_to_conditional_rates``
    and ModelOpt's ``build_profile`` convert."""
    out, previous = [], 1.0
    for m in marginal:
        out.append(m / previous if previous > 0 else 0.0)
        previous = m
    return out


def validation(marginal: Sequence[float], mean: float) -> dict[str, Any]:
    """ModelOpt's ``validation`` object for these vectors."""
    implied = 1.0 + sum(marginal)
    delta = abs(implied - mean)
    violations = [{"position": i, "value": marginal[i], "previous": marginal[i - 1]}
                  for i in range(1, len(marginal)) if marginal[i] > marginal[i - 1] + MONOTONE_SLACK]
    return {
        "mean_consistency": {"implied_mean_accept_length": round(implied, DECIMALS),
                             "reported_mean_accept_length": mean, "abs_delta": round(delta, DECIMALS),
                             "tolerance": MEAN_TOLERANCE, "passed": delta <= MEAN_TOLERANCE},
        "marginal_monotonicity": {"passed": not violations, "violations": violations},
    }


# --- checking, writing, reading ----------------------------------------------------------------


def check_profile(profile: AcceptanceProfile, where: str) -> None:
    """Refuse vectors a consumer cannot use: wrong length, not finite probabilities, or failing
    ModelOpt's two checks (mean consistency within 0.02, non-increasing marginals)."""
    k = profile.num_speculative_tokens
    for name in ("marginal_accept_rates", "conditional_accept_rates"):
        values = getattr(profile, name)
        if len(values) != k:
            raise DraftlabError(f"{where}: {name} has {len(values)} entries but num_speculative_tokens is {k}")
        bad = [v for v in values if not _number(v) or not math.isfinite(v) or not 0 <= v <= 1]
        if bad:
            raise DraftlabError(f"{where}: {name} holds {bad[0]!r}, not a finite probability in [0, 1]")
    mean = profile.mean_accept_length
    if not _number(mean) or not math.isfinite(mean) or not 1 <= mean <= k + 1:
        raise DraftlabError(f"{where}: mean_accept_length {mean!r} is not a number between 1 and K + 1 = {k + 1}")
    checks = validation(profile.marginal_accept_rates, mean)
    bad_order = checks["marginal_monotonicity"]["violations"]
    if bad_order:
        v = bad_order[0]
        raise DraftlabError(f"{where}: marginal_accept_rates must be non-increasing (P(first i+1 drafts accepted)), "
                            f"but position {v['position']} has {v['value']} after {v['previous']}")
    consistency = checks["mean_consistency"]
    if not consistency["passed"]:
        raise DraftlabError(f"{where}: mean_accept_length {mean:g} differs from 1 + sum(marginal_accept_rates) = "
                            f"{consistency['implied_mean_accept_length']:g} by {consistency['abs_delta']:g} "
                            f"(> {MEAN_TOLERANCE}); the vectors and the mean do not describe the same runs")


def write_profile(profile: AcceptanceProfile, path: str | Path) -> Path:
    """Check the profile, then write it atomically (with draftlab's ``provenance``)."""
    check_profile(profile, str(path))
    write_json_atomic(path, document(profile))
    return Path(path)


def read_profile(path: str | Path) -> AcceptanceProfile:
    """Read and check a ``speculation_profile.json`` (draftlab's or ModelOpt's); one line on what is wrong."""
    path = Path(path)
    doc = jsonio.read(path, "no such file; write one with draftlab probe --profile-out")
    where = str(path)
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise DraftlabError(f"{where}: not a speculation profile (no schema_version); write one with "
                            "draftlab probe --profile-out")
    version = doc["schema_version"]
    if not isinstance(version, str) or version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise DraftlabError(f"{where}: schema_version {version!r} is not one draftlab reads ({SCHEMA_VERSION})")
    if doc.get("measured") is False:
        raise DraftlabError(f"{where}: measured is false (a stub written at export); measure one with "
                            "draftlab probe --profile-out")
    k = doc.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise DraftlabError(f"{where}: num_speculative_tokens must be a positive integer, got {k!r}")
    marginal = doc.get("marginal_accept_rates")
    if not isinstance(marginal, list):
        reason = doc.get("vectors_unavailable_reason")
        raise DraftlabError(f"{where}: no marginal_accept_rates" + (f" ({reason})" if reason else "")
                            + "; the profile has no per-position vectors to use")
    conditional = doc.get("conditional_accept_rates")
    if conditional is None and all(_number(m) for m in marginal):
        conditional = conditional_rates(marginal)
    config = doc.get("speculation_config")
    if config is not None and not _valid_config(config, k):
        raise DraftlabError(f"{where}: speculation_config must hold integer steps = num_speculative_tokens ({k}), "
                            f"topk and num_draft_tokens, got {config!r}")
    fields = {name: doc[name] for name in AcceptanceProfile.__dataclass_fields__ if name in doc}
    fields.update(num_speculative_tokens=k, marginal_accept_rates=marginal, conditional_accept_rates=conditional,
                  mean_accept_length=doc.get("mean_accept_length"))
    try:
        profile = AcceptanceProfile(**fields)
    except TypeError as exc:
        raise DraftlabError(f"{where}: not a speculation profile ({exc})") from None
    if not isinstance(profile.conditional_accept_rates, list):
        raise DraftlabError(f"{where}: conditional_accept_rates must be a list")
    if not isinstance(profile.accept_length_by_k, dict):
        raise DraftlabError(f"{where}: accept_length_by_k must be an object of K -> mean accept length")
    check_profile(profile, where)
    return profile


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _valid_config(config: Any, k: int) -> bool:
    names = ("steps", "topk", "num_draft_tokens")
    return (isinstance(config, dict) and all(isinstance(config.get(n), int) and not isinstance(config.get(n), bool)
                                             and config[n] >= 1 for n in names) and config["steps"] == k)


# --- using it for other configs ----------------------------------------------------------------


def accept_length_for(profile: AcceptanceProfile, steps: int, topk: int, num_draft_tokens: int) -> tuple[float, str]:
    """The mean accept length this profile gives a config, and how it was derived.

    - The probed config itself: ``mean_accept_length``, exactly the probe's figure.
    - A chain whose K has a measured ``accept_length_by_k`` entry: that entry.
    - A chain of k drafts, k <= K, from a chain profile: ``1 + sum(marginal[:k])``, an estimate. Per
      cycle root it is exact under greedy verification: the drafter proposes token j from the root and
      the drafts before it only, never knowing how many will follow, so a k-chain's drafts are the
      first k of the K-chain's at the same root, and a chain accepts a prefix, so the k-chain accepts
      min(a, k) where the K-chain accepts a, whose mean is 1 + sum_{i<k} P(a > i). But a decode visits
      different roots for different k (each cycle's length moves the next root): the K-chain's roots
      follow its rejections, harder places than the k-chain's, so the estimate runs low (6-13% for
      k = 1..5 from 6/1/7 on the toy pair; benchmarks/profile_chains.py, benchmarks/RESULTS.md).
    - Anything else (more drafts than measured, a tree, a chain from a tree's profile) cannot be
      derived: DraftlabError, naming the config to probe.
    """
    own = profile.speculation_config
    if own is not None and (own["steps"], own["topk"], own["num_draft_tokens"]) == (steps, topk, num_draft_tokens):
        return profile.mean_accept_length, "measured"
    label = f"{steps}/{topk}/{num_draft_tokens}"
    k = profile.num_speculative_tokens
    measured = f"{own['steps']}/{own['topk']}/{own['num_draft_tokens']}" if own else f"K = {k}"
    if topk != 1 or num_draft_tokens != steps + 1:
        raise DraftlabError(f"the profile ({measured}) cannot give the tree {label} an accept length: a tree's depends "
                            f"on its whole shape; probe {label}, or assume one in --grid as {label}:AL")
    by_k = profile.accept_length_by_k.get(str(steps))
    if by_k is not None and profile.is_chain and _number(by_k):
        return float(by_k), f"accept_length_by_k[{steps}]"
    if not profile.is_chain:
        raise DraftlabError(f"the profile was measured on the tree {measured}; its per-depth rates do not give the "
                            f"chain {label}; probe {label}")
    if steps > profile.num_speculative_tokens:
        raise DraftlabError(f"the profile measured {profile.num_speculative_tokens} draft positions; {label} needs "
                            f"{steps}; probe {label} (or a longer chain)")
    return 1.0 + sum(profile.marginal_accept_rates[:steps]), f"1 + first {steps} marginals, an estimate"
