"""Rules on positions: the drafter's context length and RoPE against the target's."""

from __future__ import annotations

from collections.abc import Iterator

from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair
from draftlab.engines.loading import engine_loading


def context_length(pair: Pair) -> Iterator[Finding]:
    """The drafter must cover the target's context."""
    mine, theirs = pair.drafter.max_position_embeddings, pair.target.max_position_embeddings
    if type(mine) is not int or type(theirs) is not int or mine >= theirs:
        return  # a value of another type: config-type's and config-value's
    yield Finding("context-too-short", "error", pair.layer_field("max_position_embeddings"),
                  f"max_position_embeddings is {mine} but the target serves {theirs} tokens; "
                  f"{engine_loading(pair.engine).short_context}",
                  f"set max_position_embeddings to {theirs} (acceptance past the trained length may still "
                  "drop: measure it on long prompts)", fixable=True)


def rope(pair: Pair) -> Iterator[Finding]:
    """The drafter's RoPE should match the target's (converters have dropped rope_scaling before)."""
    mine, theirs = pair.drafter.rope, pair.target.rope
    mla = pair.target.attention == "MLA"
    for code, key, a, b in (("rope-theta", "rope_theta", mine.theta, theirs.theta),
                            ("rope-scaling", "rope_scaling", mine.scaling, theirs.scaling)):
        if a == b:
            continue
        if mla:
            yield Finding(code, "info", pair.layer_field(key),
                          f"the drafter's {key} is {a} and the target's is {b}; the target's MLA applies RoPE to "
                          "part of each head only, so a Llama-layer drafter keeps the RoPE it was trained with",
                          "nothing to change unless the drafter was trained with the target's RoPE")
        else:
            yield Finding(code, "warning", pair.layer_field(key),
                          f"the drafter's {key} is {a} but the target's is {b}; positions are encoded differently "
                          "from the target's hidden states",
                          f"copy the target's RoPE settings ({key} = {b}) unless the drafter was trained "
                          "with its own", fixable=True)


# The RoPE scaling types the Llama drafter is built with, and the keys each needs besides rope_theta and
# original_max_position_embeddings (both filled in from the config): transformers 5.25's validation
# (modeling_rope_utils.py ``_validate_<type>_rope_parameters``), which draftlab's runtime runs; vLLM's get_rope
# (rotary_embedding.py) raises on a type it does not know too.
ROPE_KEYS = {"default": (), "linear": ("factor",), "dynamic": ("factor",), "yarn": ("factor",),
             "longrope": ("short_factor", "long_factor"), "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
             "mrope": ("mrope_section",)}  # mrope: Qwen2.5-VL drafters, engines only (drafter-unsupported here)


def rope_valid(pair: Pair) -> Iterator[Finding]:
    """A Llama drafter's rope_scaling of an unknown type, or without the keys its type needs, fails to build."""
    scaling = pair.drafter.rope.scaling
    if scaling is None or pair.drafter.variant.mla is not None:  # MLA: checkpoint.variants' own RoPE rule
        return
    kind = scaling.get("rope_type")
    needed = ROPE_KEYS.get(kind) if isinstance(kind, str) else None
    missing = [k for k in needed or () if scaling.get(k) is None]
    if needed is not None and not missing:
        return
    what = (f"needs {', '.join(missing)}" if needed is not None
            else f"is not a type the engines or transformers build (they know {', '.join(ROPE_KEYS)})")
    yield Finding("rope-invalid", "error", pair.layer_field("rope_scaling"),
                  f"rope_scaling type {kind!r} {what}: building the drafter's RoPE fails in vLLM, SGLang and draftlab",
                  f"copy the target's RoPE settings ({pair.target.rope.scaling}) if the drafter was trained with them")


RULES = (context_length, rope, rope_valid)
