"""Each engine's own synthetic-acceptance settings, per release (../shared/reference/engine-interop.md 2, 3a, 4, 7).

- vLLM 0.20.0+ (PR #40662; ``vllm/config/speculative.py``, ``SpeculativeConfig`` and
  ``_resolve_synthetic_acceptance_rates``, unchanged through 0.34.0): inside ``--speculative-config``,
  ``"rejection_sample_method": "synthetic"`` with exactly one of ``synthetic_acceptance_rates``
  (marginal per position, length ``num_speculative_tokens``, each in [0, 1], non-increasing) or
  ``synthetic_acceptance_length`` (in [1, K + 1]; vLLM turns it into its minimum-variance schedule).
  A profile is passed as rates, a bare AL as a length. Draws are per request and per position;
  accepted positions emit the real draft tokens. 0.19.0 had only a scalar ``synthetic_acceptance_rate``
  (Model Runner V2, geometric schedule), which is not translated: refused.
- SGLang (``SGLANG_SIMULATE_ACC_LEN`` in ``sglang/srt/environ.py`` since 0.5.5, read once at import in
  ``speculative/spec_utils.py``): the AL with the bonus, clamped to [1, steps + 1]. Its method
  ``SGLANG_SIMULATE_ACC_METHOD`` defaults to ``match-expected`` (mean = AL) only from 0.5.11; before
  that ``multinomial``, whose mean is not AL, so draftlab always sets ``match-expected``.
  ``SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token`` (0.5.15+, topk 1 only) emits the real drafts; the
  default ``fixed`` emits token id 100, so the text is garbage. One draw per batch step for every
  request, and the per-position shape is lost (a two-point accept length around the mean).
- TensorRT-LLM (``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS``, ``tensorrt_llm/_torch/speculative/
  interface.py``): accepted *draft* tokens, AL - 1. The one-model path (EAGLE-3's default) reads a float:
  the integer part always, one more with probability of the fraction, per request; the two-model path
  reads ``int()``, so a fraction there turns it off. The first release is not confirmed, so no
  release is checked.
- draftlab's reference server: ``--synthetic-acceptance`` itself (:mod:`draftlab.serve.synthetic`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftlab.acceptance.synthetic import OPTION, SyntheticAcceptance
from draftlab.engines.releases import newest, release, version_key
from draftlab.errors import DraftlabError

if TYPE_CHECKING:
    from draftlab.engines.launch import EngineCommand

VLLM_FIRST = "0.20.0"  # synthetic_acceptance_rates / synthetic_acceptance_length (PR #40662)
SGLANG_FIRST = "0.5.5"  # SGLANG_SIMULATE_ACC_LEN (0.5.2 read an unprefixed SIMULATE_ACC_LEN)
SGLANG_MATCH_EXPECTED_DEFAULT = "0.5.11"
SGLANG_REAL_DRAFT_TOKENS = "0.5.15"
SGLANG_ENV = "SGLANG_SIMULATE_ACC_LEN"
SGLANG_METHOD_ENV = "SGLANG_SIMULATE_ACC_METHOD"
SGLANG_TOKEN_MODE_ENV = "SGLANG_SIMULATE_ACC_TOKEN_MODE"
TRTLLM_ENV = "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"
ENGINES = ("vllm", "sglang", "trtllm", "draftlab")


@dataclass(frozen=True)
class SyntheticSettings:
    """What to give one engine release so that it forces the requested acceptance."""

    engine: str
    version: str | None  # None: TensorRT-LLM (no release checked) and draftlab's own server
    accept_length: float  # the mean accept length the run is forced to (bonus included)
    marginal_accept_rates: list[float] | None  # per position, where the engine takes them (else None)
    speculative_config: dict[str, Any] = field(default_factory=dict)  # vLLM: keys of --speculative-config
    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)  # flags to add (draftlab serve)
    notes: list[str] = field(default_factory=list)


def synthetic_settings(engine: str, synthetic: SyntheticAcceptance, *, steps: int, topk: int = 1,
                       version: str | None = None) -> SyntheticSettings:
    """The settings of ``engine`` at ``version`` (None: the newest draftlab knows) for a run drafting ``steps``
    tokens; DraftlabError, in one line, for a release without the feature or a request it cannot run."""
    if engine in ("vllm", "sglang"):  # an empty version is refused (releases.resolve), never taken for the newest
        known = newest(engine) if version is None else release(engine, version).version
        return (_vllm if engine == "vllm" else _sglang)(synthetic, steps, topk, known)
    if engine == "trtllm":
        return _trtllm(synthetic, steps, version)
    if engine == "draftlab":
        return _reference(synthetic, steps, topk)
    raise DraftlabError(f"{OPTION}: unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def _vllm(synthetic: SyntheticAcceptance, steps: int, topk: int, version: str) -> SyntheticSettings:
    release(engine="vllm", version=version)
    if version_key(version) < version_key(VLLM_FIRST):
        raise DraftlabError(f"{OPTION}: vLLM {version} has no synthetic_acceptance_rates or "
                            f"synthetic_acceptance_length (first in {VLLM_FIRST}, PR #40662; 0.19.0's scalar synthetic_acceptance_rate is not "
                            f"translated); use --engine-version {VLLM_FIRST} or later")
    _chain(topk, "vLLM drafts a chain of num_speculative_tokens")
    al = synthetic.accept_length_for(steps)
    config: dict[str, Any] = {"rejection_sample_method": "synthetic"}
    notes = ["synthetic acceptance: vLLM draws per request and position and emits the accepted draft tokens, so the "
             "text is the drafter's where it accepted, not the target's"]
    if synthetic.marginals is None:
        config["synthetic_acceptance_length"] = al
        notes.append(f"vLLM turns synthetic_acceptance_length {al:g} into its minimum-variance schedule "
                     f"{synthetic.marginals_for(steps)}: every cycle accepts {int(al - 1)} or {int(al - 1) + 1} drafts")
        rates = None
    else:
        rates = synthetic.marginals_for(steps)
        config["synthetic_acceptance_rates"] = rates
    return SyntheticSettings("vllm", version, al, rates, speculative_config=config, notes=notes)


def _sglang(synthetic: SyntheticAcceptance, steps: int, topk: int, version: str) -> SyntheticSettings:
    release(engine="sglang", version=version)
    if version_key(version) < version_key(SGLANG_FIRST):
        raise DraftlabError(f"{OPTION}: SGLang {version} has no {SGLANG_ENV} (first in {SGLANG_FIRST}); "
                            f"use --engine-version {SGLANG_FIRST} or later")
    al = synthetic.accept_length_for(steps)
    env = {SGLANG_ENV: _number(al), SGLANG_METHOD_ENV: "match-expected"}
    notes = [f"{SGLANG_ENV}={_number(al)}: SGLang forces the mean accept length only (the per-position shape is "
             "lost: each step accepts floor or ceil of it) and draws once per batch step for every request"]
    if version_key(version) < version_key(SGLANG_MATCH_EXPECTED_DEFAULT):
        notes.append(f"{SGLANG_METHOD_ENV}=match-expected set explicitly: SGLang {version}'s default (multinomial) "
                     "does not keep the mean")
    if version_key(version) >= version_key(SGLANG_REAL_DRAFT_TOKENS) and topk == 1:
        env[SGLANG_TOKEN_MODE_ENV] = "real-draft-token"
        notes.append(f"{SGLANG_TOKEN_MODE_ENV}=real-draft-token: the text is the real drafts plus the target's token")
    else:
        why = f"SGLang {version} has no real-draft-token mode" if topk == 1 else "real-draft-token mode needs topk 1"
        notes.append(f"the output text is token id 100 repeated ({why}): measure speed, not text")
    return SyntheticSettings("sglang", version, al, None, env=env, notes=notes)


def _trtllm(synthetic: SyntheticAcceptance, steps: int, version: str | None) -> SyntheticSettings:
    if version is not None:
        raise DraftlabError(f"{OPTION}: draftlab knows no TensorRT-LLM releases (the first with a float "
                            f"{TRTLLM_ENV} is not confirmed); leave out --engine-version")
    al = synthetic.accept_length_for(steps)
    drafts = al - 1
    notes = [f"{TRTLLM_ENV}={_number(drafts)}: accepted draft tokens (AL - 1); the integer part every step, one more "
             "with the fraction's probability, per request, on the one-model path (EAGLE-3's default)"]
    if drafts != int(drafts):
        notes.append("the two-model path reads an integer: a fraction there turns forcing off")
    return SyntheticSettings("trtllm", None, al, None, env={TRTLLM_ENV: _number(drafts)}, notes=notes)


def _reference(synthetic: SyntheticAcceptance, steps: int, topk: int) -> SyntheticSettings:
    _chain(topk, "draftlab serve forces acceptance along a chain")
    al = synthetic.accept_length_for(steps)
    value = str(Path(synthetic.profile).resolve()) if synthetic.profile is not None else synthetic.source
    return SyntheticSettings("draftlab", None, al, synthetic.marginals_for(steps), argv=[OPTION, value],
                             notes=["synthetic acceptance: the server emits the accepted drafts, then the target's "
                                    "token, so the text is not the target's"])


def _chain(topk: int, why: str) -> None:
    if topk != 1:
        raise DraftlabError(f"{OPTION}: {why}; use --topk 1, not {topk}")


def _number(value: float) -> str:
    """A float as an environment variable: up to 6 decimals, no trailing zeros."""
    return f"{value:.6f}".rstrip("0").rstrip(".")


def with_synthetic(command: EngineCommand, synthetic: SyntheticAcceptance | None,
                   version: str | None = None) -> EngineCommand:
    """``command`` with the engine's synthetic-acceptance settings added (unchanged when ``synthetic`` is None)."""
    if synthetic is None:
        return command
    if command.spec is None:
        raise DraftlabError(f"{OPTION} forces the acceptance of drafts; it needs --drafter "
                            "(the baseline drafts nothing)")
    settings = synthetic_settings(command.engine, synthetic, steps=command.spec.steps, topk=command.spec.topk,
                                  version=version)
    argv = list(command.argv)
    if settings.speculative_config:
        at = argv.index("--speculative-config") + 1
        argv[at] = json.dumps({**json.loads(argv[at]), **settings.speculative_config})
    if settings.argv:
        at = argv.index("--num-draft-tokens") + 2  # after the reference server's speculation flags
        argv[at:at] = settings.argv
    return dataclasses.replace(command, argv=argv, env={**command.env, **settings.env},
                               notes=[*command.notes, *settings.notes])
