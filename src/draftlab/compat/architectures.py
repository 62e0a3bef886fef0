"""Rules on the kind of drafter a release builds: its decoder layer (Llama, or speculators' ``--draft-arch qwen3``
layer with per-head q_norm/k_norm) and parallel drafting (P-EAGLE). The per-release facts are engines/loading.py's
(:func:`~draftlab.engines.loading.built_layer`, :func:`~draftlab.engines.loading.parallel_drafting`)."""

from __future__ import annotations

from collections.abc import Iterator

from draftlab.checkpoint.layouts import layer_kind_of
from draftlab.checkpoint.variants import parallel_drafting
from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair
from draftlab.engines.loading import (
    VLLM_QWEN3_DRAFTER_FIRST,
    built_layer,
    drafter_class,
)
from draftlab.engines.loading import parallel_drafting as served_drafting

_LAYER = {"llama": "a Llama layer", "qwen3": "a Qwen3 layer (per-head q_norm/k_norm)"}


def decoder_layer(pair: Pair) -> Iterator[Finding]:
    """The layer the release builds must be the layer the weights are: a Qwen3 drafter's q_norm/k_norm have no place
    in a Llama layer, a Qwen3 layer without them runs its norms as initialised."""
    if drafter_class(pair.drafter) == "mla":
        return
    stored = layer_kind_of(pair.drafter_ckpt.tensors)
    built, why = built_layer(pair.engine, pair.drafter, pair.release.version)
    field = pair.layer_field("model_type")
    fixable_kind = pair.drafter.layout == "speculators" and pair.engine == "vllm" and pair.release.at(
        VLLM_QWEN3_DRAFTER_FIRST)
    if built == stored:
        return
    if built is None or fixable_kind:
        yield Finding("layer-kind", "error", field,
                      f"{why}; the weights are {_LAYER[stored]}" + ("" if built is None else
                                                                    f", so it would build {_LAYER[built]}"),
                      f"set {field} to {stored!r}", fixable=True)
        return
    if stored == "qwen3":
        fate = ("it drops the q_norm/k_norm weights silently and computes without the per-head norms: another "
                "function, acceptance collapses with no error") if pair.engine == "sglang" else (
                "the q_norm/k_norm weights have no parameter there, so the load fails")
        yield Finding("qwen3-drafter", "error", field,
                      f"the drafter is {_LAYER['qwen3']} but {why}; {fate}",
                      f"serve it with vLLM >= {VLLM_QWEN3_DRAFTER_FIRST} from the speculators layout "
                      "(transformer_layer_config.model_type 'qwen3'; draftlab convert --to speculators writes it)")
        return
    yield Finding("layer-kind", "error", field,
                  f"{why}, but the weights are {_LAYER[stored]}: the per-head norms would run as initialised",
                  f"set {field} to 'llama'", fixable=pair.drafter.layout == "speculators")


def p_eagle(pair: Pair) -> Iterator[Finding]:
    """A P-EAGLE drafter: served in parallel, autoregressively (not as trained) or refused, per release."""
    what = parallel_drafting(pair.drafter_ckpt.config, pair.drafter_ckpt.tensors)
    if what is None:
        return
    peagle_config = pair.drafter_ckpt.config.get("speculators_model_type") == "peagle"
    how, why = served_drafting(pair.engine, pair.release.version, peagle_config)
    field = "speculators_model_type" if peagle_config else "mask_hidden"
    computes = "draftlab does not compute parallel drafting, so its probe, generate and train refuse the drafter"
    if how == "parallel":
        yield Finding("parallel-drafting", "info", field, f"a P-EAGLE drafter ({what}): {why}; {computes}",
                      "measure it on the engine itself (draftlab bench)")
    elif how == "autoregressive":
        yield Finding("parallel-drafting", "warning", field,
                      f"a P-EAGLE drafter ({what}): {why}, so acceptance is not what it was trained for; {computes}",
                      "serve it with vLLM 0.29.0 to 0.33.0, which draft in parallel")
    else:
        yield Finding("parallel-drafting", "error", field, f"a P-EAGLE drafter ({what}): {why}",
                      "serve it with vLLM 0.29.0 to 0.33.0, which draft in parallel")


RULES = (decoder_layer, p_eagle)
