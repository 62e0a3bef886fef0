"""Translating a drafter config and its tensor names between the two layouts.

The vLLM speculators layout nests the decoder-layer fields under ``transformer_layer_config``, keeps
the EAGLE-3 fields at the top, names the verifier in ``speculators_config`` and its layer tensors
``layers.0.*``; the SpecForge / SGLang layout is one flat Llama config with ``midlayer.*`` tensors.
Field names are speculators 0.9.0's ``Eagle3SpeculatorConfig`` and ``SpeculatorsConfig``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from draftlab.checkpoint.variants import FLAGS

# Top-level fields of a speculators config that describe the speculator, not the layer.
_SPECULATORS_ONLY = ("speculators_config", "speculators_model_type", "speculators_version",
                     "transformer_layer_config", "auto_map", "architectures", "has_no_defaults_at_init")

# Fields of a flat config that a speculators config keeps at the top level, beside the layer.
SPECULATORS_TOP_LEVEL = ("architectures", "draft_vocab_size", "target_hidden_size", "norm_before_residual",
                         "eagle_aux_hidden_state_layer_ids", "eagle_config", *(f.name for f in FLAGS),
                         "embed_requires_grad")

SPECULATORS_VERSION = "0.9.0"  # the speculators release whose format is written (and tested in tests/peers)
SPECULATORS_ARCHITECTURE = "Eagle3Speculator"
# speculators' own eagle3 converter proposes greedy chains of 3 tokens; vLLM takes its
# speculative_tokens as the default num_speculative_tokens.
DEFAULT_PROPOSAL = {"proposal_type": "greedy", "speculative_tokens": 3, "verifier_accept_k": 1,
                    "accept_tolerance": 0.0}

LAYER_PREFIXES = {"specforge": "midlayer.", "speculators": "layers.0."}
# A Qwen3 decoder layer's per-head norms (speculators ``--draft-arch qwen3``; ``layers.0.`` / ``midlayer.`` before)
QK_NORMS = ("self_attn.q_norm.weight", "self_attn.k_norm.weight")


def layer_kind_of(tensor_names: Iterable[str]) -> str:
    """The decoder layer the stored weights are: "qwen3" when they hold per-head q/k norms, else "llama".
    A speculators config names it in ``transformer_layer_config.model_type`` (vLLM >= 0.24 builds
    ``Eagle3Qwen3ForCausalLM`` for "qwen3", its Llama drafter for "llama" and refuses anything else)."""
    bare = {n.removeprefix("model.") for n in tensor_names}
    qk = any(prefix + norm in bare for prefix in LAYER_PREFIXES.values() for norm in QK_NORMS)
    return "qwen3" if qk else "llama"


def flatten_speculators(config: dict[str, Any], architecture: str) -> dict[str, Any]:
    """A flat SpecForge-layout config equivalent to a speculators ``config``."""
    flat = copy.deepcopy(config["transformer_layer_config"])
    for key, value in config.items():
        if key not in _SPECULATORS_ONLY:
            flat.setdefault(key, copy.deepcopy(value))
    flat["architectures"] = [architecture]
    flat["num_hidden_layers"] = flat.get("num_hidden_layers", 1)
    return flat


def nest_speculators(flat: dict[str, Any], *, verifier: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """A speculators-layout config holding a flat ``flat`` config's decoder layer.

    ``verifier`` is ``{"name_or_path", "architectures"}``; ``top`` the EAGLE-3 fields to write at the
    top level (draft vocabulary, aux ids in vLLM's convention, residual order...), which replace the
    flat config's own. The dtype keys are written at both levels, as speculators' converter does.
    """
    layer = {k: copy.deepcopy(v) for k, v in flat.items() if k not in SPECULATORS_TOP_LEVEL}
    layer.setdefault("model_type", "llama")
    layer.setdefault("num_hidden_layers", 1)
    config: dict[str, Any] = {
        "architectures": [SPECULATORS_ARCHITECTURE],
        "speculators_model_type": "eagle3",
        "speculators_version": SPECULATORS_VERSION,
        "speculators_config": {"algorithm": "eagle3", "proposal_methods": [dict(DEFAULT_PROPOSAL)],
                               "default_proposal_method": DEFAULT_PROPOSAL["proposal_type"],
                               "verifier": copy.deepcopy(verifier)},
        "transformer_layer_config": layer,
    }
    config.update(copy.deepcopy(top))
    for key in ("torch_dtype", "dtype", "tie_word_embeddings"):
        if key in layer:
            config.setdefault(key, copy.deepcopy(layer[key]))
    return config


def layer_renames(names: Iterable[str], layout: str) -> dict[str, str]:
    """Renames of the first decoder layer's tensors into ``layout``'s spelling (``midlayer.*`` or
    ``layers.0.*``, with or without a ``model.`` prefix); other names are left alone."""
    new = LAYER_PREFIXES[layout]
    old = next(p for p in LAYER_PREFIXES.values() if p != new)
    renames = {}
    for name in names:
        bare = name.removeprefix("model.")
        if bare.startswith(old):
            renames[name] = name[: len(name) - len(bare)] + new + bare.removeprefix(old)
    return renames
