"""Everything that differs between SGLang and vLLM, and nothing else.

Inside draftlab one convention holds: aux layer k (0-based) is the OUTPUT of target decoder layer
k, before the final norm. The engines translate at this edge:

- SGLang reads ``eagle_config.eagle_aux_hidden_state_layer_ids`` as output-of-layer ids (it
  captures the input of layer k + 1) and ignores a top-level list;
- vLLM reads a top-level ``eagle_aux_hidden_state_layer_ids`` as input-of-layer ids (canonical + 1)
  and ignores ``eagle_config``;
- with no ids set, both capture canonical ``[1, L//2 - 1, L - 4]`` (EAGLE's "inputs of layers
  2, L//2, L - 3").
"""

from __future__ import annotations

from dataclasses import dataclass

from draftlab.checkpoint.configs import DrafterConfig
from draftlab.errors import DraftlabError

ENGINES = ("sglang", "vllm")


def default_aux_layers(num_layers: int) -> list[int]:
    """Canonical (output-of-layer) ids both engines capture when a drafter sets none."""
    return [1, num_layers // 2 - 1, num_layers - 4]


@dataclass(frozen=True)
class AuxLayers:
    """The target layers an engine will capture for a drafter, in the canonical convention."""

    layers: list[int]  # canonical: output of decoder layer k
    source: str  # "eagle_config", "top-level" or "default"
    raw_ids: list[int] | None  # the ids as written in the config field the engine reads


def aux_layers(engine: str, drafter: DrafterConfig, num_target_layers: int) -> AuxLayers:
    """Which target layers ``engine`` will capture for ``drafter``."""
    return _configured(engine, drafter) or AuxLayers(default_aux_layers(num_target_layers), "default", None)


def _configured(engine: str, drafter: DrafterConfig) -> AuxLayers | None:
    """The layers named in the field ``engine`` reads, None when that field is unset."""
    if engine == "sglang":
        raw = drafter.eagle_config_aux_ids
        return None if raw is None else AuxLayers(list(raw), "eagle_config", raw)
    if engine == "vllm":
        raw = drafter.top_level_aux_ids
        return None if raw is None else AuxLayers([i - 1 for i in raw], "top-level", raw)
    raise DraftlabError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def written_aux_ids(engine: str, canonical: list[int]) -> list[int]:
    """The ids to write into the config field ``engine`` reads so it captures ``canonical``."""
    if engine == "sglang":
        return list(canonical)
    if engine == "vllm":
        return [k + 1 for k in canonical]
    raise DraftlabError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


AUX_FIELDS = {"sglang": "eagle_config.eagle_aux_hidden_state_layer_ids", "vllm": "eagle_aux_hidden_state_layer_ids"}

# The engine whose aux-id convention each drafter layout is trained and shipped with.
NATIVE_ENGINE = {"specforge": "sglang", "speculators": "vllm"}


def aux_field(engine: str) -> str:
    """The (dotted) config field ``engine`` reads aux ids from."""
    if engine not in AUX_FIELDS:
        raise DraftlabError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    return AUX_FIELDS[engine]


def capturable(num_layers: int) -> range:
    """Canonical ids an engine can capture: both capture the input of layer k + 1 inside the layer
    loop, so the last layer's output (k = L - 1) is never captured."""
    return range(0, num_layers - 1)


def configured_aux_layers(drafter: DrafterConfig) -> AuxLayers | None:
    """The layers the drafter's config says it was trained on, None when it names none.

    The field of the engine native to the drafter's layout wins (SpecForge drafters are trained
    through SGLang's convention, speculators drafters through vLLM's); else the other field.
    """
    native = NATIVE_ENGINE[drafter.layout]
    other = "vllm" if native == "sglang" else "sglang"
    return _configured(native, drafter) or _configured(other, drafter)


def intended_aux_layers(drafter: DrafterConfig, num_target_layers: int) -> AuxLayers:
    """The layers the drafter was trained on, as far as its config says: its configured layers,
    else the default both engines share."""
    return configured_aux_layers(drafter) or aux_layers(NATIVE_ENGINE[drafter.layout], drafter, num_target_layers)
