"""The drafter config draftlab writes: one that SGLang, vLLM and SpecForge all build without error.

Every writer of a drafter folder (``check --fix``, ``vocab remap``, training, conversion) passes
its config through :func:`loadable_config`. Facts it rests on:

- SGLang ``srt/models/llama_eagle3.py`` and vLLM ``model_executor/models/llama_eagle3.py`` size
  ``fc`` from ``target_hidden_size`` whenever the key exists (``hasattr``), and SpecForge's
  ``LlamaForCausalLMEagle3`` reads it with ``getattr(config, key, hidden_size)``: a ``null`` there
  is not the default but ``None * 3``, a TypeError. speculators' converter and configs write
  ``"target_hidden_size": null`` for "same as hidden".
- SpecForge v0.3 (before PR #879) reads ``norm_output`` (``getattr``, default True) as "apply the
  final norm before lm_head", so a null skips the norm as false does. SGLang, vLLM and speculators
  read it in both layouts as EAGLE-3.1's "feed norm(out) to the next draft step" (default False), so a
  ``true`` carries over between layouts; speculators' ``false`` (the engines' default) is left out of
  a flattened config, where SpecForge v0.3 would read it as "skip the final norm"
  (``../shared/reference/drafter-variants.md`` section 3).
"""

from __future__ import annotations

import copy
from typing import Any

# Flat-config keys the loaders read whenever present (hasattr / getattr with a default), where null
# is not the default.
_READ_WHEN_PRESENT = ("target_hidden_size", "norm_output")

# Keys whose false is the engines' default in a speculators config but means something else to SpecForge v0.3.
FALSE_MEANS_ELSE_IN_SPECFORGE = ("norm_output",)


def loadable_config(config: dict[str, Any], *, target_hidden_size: int | None,
                    source_layout: str = "specforge") -> dict[str, Any]:
    """``config`` as it should be written: a flat (SpecForge-layout) config gets ``target_hidden_size``
    set to the target's when it differs from ``hidden_size`` (dropped when null and equal), no null
    left in a key the loaders read only when present, and, when it was flattened from a speculators
    config (``source_layout``), no ``norm_output: false`` (the default there). A speculators-layout
    config is returned unchanged (speculators and vLLM read its nulls as defaults).
    ``target_hidden_size`` None leaves a set value alone.
    """
    out = copy.deepcopy(config)
    if "transformer_layer_config" in out:
        return out
    if source_layout == "speculators":
        for key in FALSE_MEANS_ELSE_IN_SPECFORGE:
            if out.get(key) is False:
                del out[key]
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
