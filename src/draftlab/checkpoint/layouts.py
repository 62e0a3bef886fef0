"""Translating a drafter config between the two layouts.

The vLLM speculators layout nests the decoder-layer fields under ``transformer_layer_config`` and
keeps the EAGLE-3 fields at the top; the SpecForge / SGLang layout is one flat Llama config.
"""

from __future__ import annotations

import copy
from typing import Any

# Top-level fields of a speculators config that describe the speculator, not the layer.
_SPECULATORS_ONLY = ("speculators_config", "speculators_model_type", "speculators_version",
                     "transformer_layer_config", "auto_map", "architectures", "has_no_defaults_at_init")


def flatten_speculators(config: dict[str, Any], architecture: str) -> dict[str, Any]:
    """A flat SpecForge-layout config equivalent to a speculators ``config``."""
    flat = copy.deepcopy(config["transformer_layer_config"])
    for key, value in config.items():
        if key not in _SPECULATORS_ONLY:
            flat.setdefault(key, copy.deepcopy(value))
    flat["architectures"] = [architecture]
    flat["num_hidden_layers"] = flat.get("num_hidden_layers", 1)
    return flat
