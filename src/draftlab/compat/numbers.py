"""Rules on numeric config fields: a NaN, an infinity, a zero or a negative where the engines need a positive
number. ``config.json`` is parsed by Python's json (and the engines' transformers configs), which accept
``NaN`` and ``Infinity``: an ``rms_norm_eps`` of NaN loads, and every draft is then NaN (accept length 1)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from draftlab.compat.config_types import TYPES
from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair, layer_dict

# Floats the layers compute with: each finite and > 0 where present; RoPE scaling's factor too, and its other
# numbers finite (YaRN's mscale_all_dim may be 0).
POSITIVE_FLOATS = ("rms_norm_eps", "rope_theta")
FINITE_SCALING = ("original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim")
# Sizes: each a positive integer where present (the required ones are refused on reading).
POSITIVE_INTS = ("max_position_embeddings", "intermediate_size", "head_dim", "num_key_value_heads",
                 "num_hidden_layers", "sliding_window")


def _bad(value: Any, integer: bool, positive: bool = True) -> str | None:
    """Why ``value`` is no positive (or, ``positive`` False, finite) number (None: it is one, or absent)."""
    if value is None or isinstance(value, bool):
        return None if value is None else "a boolean"
    if not isinstance(value, (int, float)):
        return "not a number"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "infinite"
    if positive and value <= 0:
        return "not positive"
    if integer and type(value) is not int:
        return "not an integer"
    return None


def _problems(layer: Mapping[str, Any]) -> Iterator[tuple[str, Any, str, bool]]:
    """(dotted key, value, what is wrong, must be an integer) of each numeric field that is unusable."""
    fields: list[tuple[str, Any, bool, bool]] = [(k, layer.get(k), False, True) for k in POSITIVE_FLOATS]
    params = layer.get("rope_parameters")
    if isinstance(params, dict):
        fields.append(("rope_parameters.rope_theta", params.get("rope_theta"), False, True))
    for where in ("rope_scaling", "rope_parameters"):
        scaling = layer.get(where)
        if isinstance(scaling, dict):
            fields.append((f"{where}.factor", scaling.get("factor"), False, True))
            fields += [(f"{where}.{k}", scaling.get(k), False, False) for k in FINITE_SCALING]
    fields += [(k, layer.get(k), True, True) for k in POSITIVE_INTS]
    for key, value, integer, positive in fields:
        why = _bad(value, integer, positive)
        if why is not None:
            yield key, value, why, integer


def numeric_fields(pair: Pair) -> Iterator[Finding]:
    """Every numeric field of the drafter's and the target's config that the engines compute with."""
    for key, value, why, integer in _problems(layer_dict(pair.drafter_ckpt.config)):
        if why in ("a boolean", "not a number") and key in TYPES:
            continue  # of another type: config-type names it
        field = pair.layer_field(key)
        yield Finding("config-value", "error", field,
                      f"the drafter's {field} is {value!r} ({why}); the engines load it and compute with it, so "
                      "drafts come out as NaN or garbage (accept length 1) or the load fails",
                      f"set {field} to the value the drafter was trained with (a positive "
                      f"{'integer' if integer else 'number'})")
    target = pair.target_ckpt.config.get("text_config") or pair.target_ckpt.config
    for key, value, why, integer in _problems(target if isinstance(target, dict) else {}):
        yield Finding("config-value", "error", f"target.{key}",
                      f"the target's {key} is {value!r} ({why}); the target itself computes nothing usable",
                      f"fix the target's config.json ({key} must be a positive {'integer' if integer else 'number'})")


RULES = (numeric_fields,)
