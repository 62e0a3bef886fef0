"""Rules on positions: the drafter's context length and RoPE against the target's."""

from __future__ import annotations

from collections.abc import Iterator

from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair
from draftlab.engines.loading import engine_loading


def context_length(pair: Pair) -> Iterator[Finding]:
    """The drafter must cover the target's context."""
    mine, theirs = pair.drafter.max_position_embeddings, pair.target.max_position_embeddings
    if mine is None or theirs is None or mine >= theirs:
        return
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


RULES = (context_length, rope)
