"""Rules on the types of the drafter's decoder-layer config fields: the values the engines and draftlab's runtime
fail to build a layer from.

draftlab's runtime builds the layer's config with transformers 5.25's ``LlamaConfig`` (models/drafter.py
``_llama_config``), whose fields are type-checked strictly (``configuration_llama.py``: ``tie_word_embeddings:
bool``, ``bos_token_id: int | None``, ``rope_parameters: dict | None``, ``initializer_range`` in [0, 1], ...;
``configuration_utils.py`` iterates ``layer_types``). vLLM's and SGLang's Llama MLP (``llama.py`` ``LlamaMLP``,
which the Qwen3 layer's MLP shares; deepseek_v2.py's MLP for the MLA drafter) refuse any ``hidden_act`` but ``silu``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair, layer_dict

LAYER_TYPES = ("full_attention", "sliding_attention")


def _int(value: Any) -> bool:
    return type(value) is int


def _bool(value: Any) -> bool:
    return type(value) is bool


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def _token_ids(value: Any) -> bool:
    return _int(value) or (isinstance(value, list) and all(_int(v) for v in value))


def _dict(value: Any) -> bool:
    return isinstance(value, dict)


def _layer_types(value: Any) -> bool:
    return isinstance(value, list) and all(t in LAYER_TYPES for t in value)


BOOLEAN, INTEGER = (_bool, "a boolean"), (_int, "an integer")
NUMBER, OBJECT = (_number, "a number"), (_dict, "an object")
# key -> (accepts the value, what the field takes): null refused where the key is present ...
NOT_NULL: dict[str, tuple[Any, str]] = {
    **dict.fromkeys(("tie_word_embeddings", "attention_bias", "mlp_bias", "use_cache"), BOOLEAN),
    **dict.fromkeys(("max_position_embeddings", "intermediate_size"), INTEGER),
    **dict.fromkeys(("rope_theta", "rms_norm_eps"), NUMBER),
    "hidden_act": (lambda v: isinstance(v, str), "a string"),
    "initializer_range": (lambda v: _number(v) and 0 <= v <= 1, "a number from 0 to 1"),
}
# ... and null accepted
NULLABLE: dict[str, tuple[Any, str]] = {
    **dict.fromkeys(("bos_token_id", "pad_token_id", "head_dim", "num_key_value_heads", "pretraining_tp"), INTEGER),
    "eos_token_id": (_token_ids, "an integer or a list of integers"),
    **dict.fromkeys(("rope_scaling", "rope_parameters"), OBJECT),
    "attention_dropout": NUMBER,
    "layer_types": (_layer_types, f"a list of {' or '.join(LAYER_TYPES)}, one per layer"),
}
# key -> (accepts the value, what the field takes, whether null is accepted where the key is present)
TYPES: dict[str, tuple[Any, str, bool]] = ({k: (*v, False) for k, v in NOT_NULL.items()}
                                          | {k: (*v, True) for k, v in NULLABLE.items()})


def _wrong(layer: dict[str, Any], key: str) -> bool:
    accepts, _, nullable = TYPES[key]
    value = layer[key]
    if value is None:
        return not nullable
    if key == "layer_types" and accepts(value):  # transformers' validate_layer_type: one entry per layer
        return len(value) != layer.get("num_hidden_layers", 1)
    return not accepts(value)


def field_types(pair: Pair) -> Iterator[Finding]:
    """Each decoder-layer field of another type than the layer is built from."""
    layer = layer_dict(pair.drafter_ckpt.config)
    for key in TYPES:
        if key in layer and _wrong(layer, key):
            field, wanted = pair.layer_field(key), TYPES[key][1]
            yield Finding("config-type", "error", field,
                          f"{field} is {layer[key]!r}, not {wanted}: building the drafter's layer config fails "
                          "(transformers' typed LlamaConfig, which draftlab's runtime builds, and the engines' "
                          "loaders)",
                          f"write {field} as {wanted}, as the drafter was trained")


def hidden_act(pair: Pair) -> Iterator[Finding]:
    """vLLM's and SGLang's drafter MLPs (llama.py LlamaMLP, deepseek_v2.py's) raise on any activation but silu."""
    value = layer_dict(pair.drafter_ckpt.config).get("hidden_act")
    if value is not None and value != "silu":
        field = pair.layer_field("hidden_act")
        yield Finding("hidden-act", "error", field,
                      f"{field} is {value!r}; vLLM's and SGLang's drafter MLP (llama.py LlamaMLP) supports silu "
                      "only and refuse the drafter at load",
                      "use a drafter trained with silu (the EAGLE-3 drafters' MLP)")


RULES = (field_types, hidden_act)
