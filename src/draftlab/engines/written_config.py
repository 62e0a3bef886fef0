"""The drafter config draftlab writes: one that SGLang, vLLM and SpecForge all build without error.

Every writer of a drafter folder (``check --fix``, ``vocab remap``, training, conversion) passes
its config through :func:`loadable_config`. Facts it rests on:

- SGLang ``srt/models/llama_eagle3.py`` and vLLM ``model_executor/models/llama_eagle3.py`` size
  ``fc`` from ``target_hidden_size`` whenever the key exists (``hasattr``), and SpecForge's
  ``LlamaForCausalLMEagle3`` reads it with ``getattr(config, key, hidden_size)``: a ``null`` there
  is not the default but ``None * 3``, a TypeError. speculators' converter and configs write
  ``"target_hidden_size": null`` for "same as hidden".
- SpecForge reads ``norm_output`` (``getattr``, default True) as "apply the final norm before
  lm_head", so a null skips the norm as false does. In a speculators config (default False) the key
  means "feed the normed hidden back across draft steps": carried into a flat config, speculators'
  ``false`` makes SpecForge skip the final norm.
"""

from __future__ import annotations

import copy
from typing import Any

# Flat-config keys the loaders read whenever present (hasattr / getattr with a default), where null
# is not the default.
_READ_WHEN_PRESENT = ("target_hidden_size", "norm_output")

# Keys a speculators config shares with SpecForge's flat one, under another meaning.
SPECULATORS_MEANINGS = ("norm_output",)


def loadable_config(config: dict[str, Any], *, target_hidden_size: int | None,
                    source_layout: str = "specforge") -> dict[str, Any]:
    """``config`` as it should be written: a flat (SpecForge-layout) config gets ``target_hidden_size``
    set to the target's when it differs from ``hidden_size`` (dropped when null and equal), no null
    left in a key the loaders read only when present, and, when it was flattened from a speculators
    config (``source_layout``), none of the keys that mean something else there. A speculators-layout
    config is returned unchanged (speculators and vLLM read its nulls as defaults).
    ``target_hidden_size`` None leaves a set value alone.
    """
    out = copy.deepcopy(config)
    if "transformer_layer_config" in out:
        return out
    if source_layout == "speculators":
        for key in SPECULATORS_MEANINGS:
            out.pop(key, None)
    hidden = out.get("hidden_size")
    if target_hidden_size is not None:
        if target_hidden_size != hidden:
            out["target_hidden_size"] = target_hidden_size
        elif out.get("target_hidden_size") is None:
            out.pop("target_hidden_size", None)
    for key in null_fields(out):
        del out[key]
    return out


def null_fields(config: dict[str, Any]) -> list[str]:
    """Keys of a flat config that SGLang, vLLM or SpecForge read whenever present, left null."""
    if "transformer_layer_config" in config:
        return []
    return [key for key in _READ_WHEN_PRESENT if key in config and config[key] is None]
