"""Which target layers an engine release captures for a drafter, in draftlab's canonical convention.

Canonical: aux layer k (0-based) is the OUTPUT of target decoder layer k, before the final norm
(DESIGN.md); a "boundary" id b is the residual stream entering layer b, so canonical k = boundary
k + 1. How each release reads the ids (``../shared/reference/drafter-variants.md`` section 5):

- SGLang reads ``eagle_config.eagle_aux_hidden_state_layer_ids``. Up to 0.5.12.post1 every explicit id
  gets ``+1`` (id k captures the input of layer k + 1: canonical k). From 0.5.13 DeepSeek/Kimi/GLM-lite
  targets add 1 only when the first id is 1 and take other ids verbatim as boundaries (#25454); from
  0.5.17 gpt-oss takes boundary ids verbatim when ``max(ids) == L`` (#32334).
- vLLM reads a top-level ``eagle_aux_hidden_state_layer_ids`` verbatim as boundaries. Without one, the
  V1 runner of 0.22-0.33 falls back to the nested ``eagle_config`` ids, verbatim; Model Runner V2
  (the default for every target from 0.29, the only runner of 0.34) never reads them and uses the default.
- With no ids, both capture boundaries ``[2, L//2, L - 3]``: canonical ``[1, L//2 - 1, L - 4]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from draftlab.checkpoint.configs import DrafterConfig, TargetConfig
from draftlab.engines.releases import Release, newest, release, target_family
from draftlab.errors import DraftlabError

ENGINES = ("sglang", "vllm")
AUX_FIELDS = {"sglang": "eagle_config.eagle_aux_hidden_state_layer_ids", "vllm": "eagle_aux_hidden_state_layer_ids"}
# The engine whose aux-id convention each drafter layout is trained and shipped with.
NATIVE_ENGINE = {"specforge": "sglang", "speculators": "vllm"}


def default_aux_layers(num_layers: int) -> list[int]:
    """Canonical (output-of-layer) ids both engines capture when a drafter sets none."""
    return [1, num_layers // 2 - 1, num_layers - 4]


@dataclass(frozen=True)
class AuxLayers:
    """The target layers an engine will capture for a drafter, in the canonical convention."""

    layers: list[int]  # canonical: output of decoder layer k
    source: str  # "eagle_config", "top-level" or "default"
    raw_ids: list[int] | None  # the ids as written in the config field the engine reads
    rule: str = ""  # how the release read them, in words


def aux_field(engine: str) -> str:
    """The (dotted) config field ``engine`` reads aux ids from first."""
    if engine not in AUX_FIELDS:
        raise DraftlabError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    return AUX_FIELDS[engine]


def _family(target: TargetConfig | None) -> str:
    return target_family(target.model_type if target is not None else None)


def _sglang(rel: Release, ids: list[int], num_layers: int | None, family: str) -> AuxLayers:
    if rel.deepseek_first_id_rule and family == "deepseek":
        if ids[0] == 1:
            return AuxLayers(list(ids), "eagle_config", ids, f"{rel.name} adds 1 to DeepSeek/Kimi ids whose first "
                                                              "id is 1")
        return AuxLayers([i - 1 for i in ids], "eagle_config", ids,
                         f"{rel.name} takes DeepSeek/Kimi ids whose first id is not 1 verbatim, as inputs of layers")
    if rel.gpt_oss_boundary_rule and family == "gpt_oss" and max(ids) == num_layers:
        return AuxLayers([i - 1 for i in ids], "eagle_config", ids,
                         f"{rel.name} takes gpt-oss ids reaching {num_layers} verbatim, as inputs of layers")
    return AuxLayers(list(ids), "eagle_config", ids, f"{rel.name} adds 1 to every id (id k captures the input of "
                                                     "layer k + 1)")


def _vllm(rel: Release, drafter: DrafterConfig, runner: str | None) -> AuxLayers | None:
    top, nested = drafter.top_level_aux_ids, drafter.eagle_config_aux_ids
    if top is not None:
        return AuxLayers([i - 1 for i in top], "top-level", top, f"{rel.name} reads top-level ids verbatim, as "
                                                                 "inputs of layers")
    if nested is not None and runner == "V1" and "MRV2" in rel.runners:
        return AuxLayers([i - 1 for i in nested], "eagle_config", nested,
                         f"{rel.name}'s V1 runner reads the nested eagle_config ids verbatim, as inputs of layers")
    return None


def runner_of(rel: Release, target: TargetConfig | None) -> str | None:
    """The vLLM runner assumed for ``target`` (V1 where the default is not pinned down)."""
    if rel.engine != "vllm":
        return None
    if target is None:
        return rel.default_runner(False) or "V1"
    return rel.default_runner(target.num_experts is not None, target.architecture, target.model_type) or "V1"


def _configured(rel: Release, drafter: DrafterConfig, num_layers: int | None, family: str,
                runner: str | None) -> AuxLayers | None:
    """The layers named in the fields ``rel`` reads, None when it reads none."""
    if rel.engine == "sglang":
        ids = drafter.eagle_config_aux_ids
        return None if not ids else _sglang(rel, ids, num_layers, family)
    return _vllm(rel, drafter, runner)


def aux_layers(engine: str, drafter: DrafterConfig, num_target_layers: int, *, target: TargetConfig | None = None,
               version: str | None = None, runner: str | None = None, family: str | None = None) -> AuxLayers:
    """Which target layers ``engine`` (at ``version``, default the newest) captures for ``drafter``.

    ``target`` gives the family (SGLang's DeepSeek/Kimi and gpt-oss rules) and whether it is MoE (vLLM's
    default runner); ``family`` stands in for it when the target is not at hand; ``runner`` ("V1" or
    "MRV2") overrides the default runner.
    """
    rel = release(engine, version)
    runner = runner or runner_of(rel, target)
    found = _configured(rel, drafter, num_target_layers, family or _family(target), runner)
    if found is not None:
        return found
    return AuxLayers(default_aux_layers(num_target_layers), "default", None,
                     f"{rel.name} captures its default inputs of layers 2, L//2, L-3")


def written_aux_ids(engine: str, canonical: list[int], *, target: TargetConfig | None = None,
                    version: str | None = None) -> list[int]:
    """The ids to write into the field ``engine`` (at ``version``) reads first so it captures ``canonical``."""
    rel = release(engine, version)
    if engine == "vllm":
        return [k + 1 for k in canonical]
    family = _family(target)
    if rel.deepseek_first_id_rule and family == "deepseek" and canonical[0] != 1:
        if canonical[0] == 0:
            raise DraftlabError(f"{rel.name} cannot capture layer 0's output first for a DeepSeek/Kimi target "
                                "(an id list starting with 1 gets +1, any other is taken verbatim)")
        return [k + 1 for k in canonical]
    if (rel.gpt_oss_boundary_rule and family == "gpt_oss" and target is not None
            and max(canonical) == target.num_layers - 1):
        return [k + 1 for k in canonical]
    return list(canonical)


def first_nameable(target: TargetConfig | None) -> int:
    """The lowest canonical layer that can open an aux list in the newest release of every engine: 1 for
    DeepSeek/Kimi targets (SGLang 0.5.13+ reads a list opening with 1 as outputs, any other as inputs of
    layers, so layer 0's output cannot be named first), else 0."""
    try:
        for engine in ENGINES:
            written_aux_ids(engine, [0], target=target)
    except DraftlabError:
        return 1
    return 0


def capturable(num_layers: int, engine: str | None = None, *, target: TargetConfig | None = None,
               version: str | None = None) -> range:
    """Canonical ids a release can capture: the input of layer k + 1, so up to L - 2; the last layer's
    output (the final boundary) too where the release captures it (SGLang 0.5.17+ gpt-oss; vLLM 0.18+
    Llama, Qwen2/Qwen3, Qwen3-MoE, gpt-oss, 0.20+ Qwen3-Next, MiniMax-M2, Gemma-4, 0.25+ DeepSeek:
    :meth:`Release.captures_final_boundary`)."""
    if engine is None:
        return range(0, num_layers - 1)
    final = target is not None and release(engine, version).captures_final_boundary(target.model_type)
    return range(0, num_layers if final else num_layers - 1)


def configured_aux_layers(drafter: DrafterConfig, num_target_layers: int | None = None, *,
                          target: TargetConfig | None = None) -> AuxLayers | None:
    """The layers the drafter's config says it was trained on, None when it names none.

    Read as the newest release of the engine native to the drafter's layout reads them (SpecForge
    drafters are trained through SGLang's convention, speculators drafters through vLLM's); else the
    other engine's field.
    """
    native = NATIVE_ENGINE[drafter.layout]
    family = _family(target)
    for engine in (native, "vllm" if native == "sglang" else "sglang"):
        rel = release(engine, newest(engine))
        found = _configured(rel, drafter, num_target_layers, family, runner_of(rel, target))
        if found is not None:
            return found
    return None


def intended_aux_layers(drafter: DrafterConfig, num_target_layers: int, *,
                        target: TargetConfig | None = None) -> AuxLayers:
    """The layers the drafter was trained on, as far as its config says: its configured layers, else
    the default both engines share."""
    return (configured_aux_layers(drafter, num_target_layers, target=target)
            or aux_layers(NATIVE_ENGINE[drafter.layout], drafter, num_target_layers, target=target))
