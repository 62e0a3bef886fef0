"""How SGLang and vLLM load an EAGLE-3 drafter: the facts ``compat`` checks a pair against.

Sources (read in the engines' code; versions drift, so each fact names where it comes from):

- SGLang ``srt/models/llama_eagle3.py``: ``EntryClass = [LlamaForCausalLMEagle3]``; a flat
  (SpecForge) config; ``num_hidden_layers != 1`` raises "EAGLE3 currently only supports 1 layer";
  ``load_weights`` binds ``name`` or else ``"model." + name`` and silently skips anything else
  (so ``layers.0.*`` is dropped without a word); any name containing ``d2t`` becomes the hot-token
  map, ``t2d`` is skipped; ``set_embed_and_head`` overwrites the drafter's ``embed_tokens`` with
  the target's unless ``target_hidden_size != hidden_size``; its layer always takes the residual
  before ``hidden_norm`` (no ``norm_before_residual`` variant). A draft context shorter than the
  target's is refused at start-up unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``, and
  running it that way has caused illegal memory accesses (sglang #3574, PR #9388).
- vLLM ``model_executor/models/registry.py`` maps ``Eagle3LlamaForCausalLM``,
  ``LlamaForCausalLMEagle3`` and the Qwen-VL / MiniMax / DeepSeek variants to its EAGLE-3 model;
  a speculators config (``speculators_model_type: eagle3``) is translated on load
  (``transformers_utils/configs/speculators``). ``load_weights`` renames ``midlayer.`` to
  ``layers.0.`` and looks every other name up strictly, so unknown names fail the load; ``t2d`` is
  skipped; multi-layer drafters are supported (PR #26164); ``norm_before_residual`` selects the
  residual order (the speculators translation defaults it to True); the drafter's own ``embed_tokens`` is
  kept when it differs from the target's. ``max_position_embeddings`` sizes the RoPE cache: longer
  prompts hit device asserts (vllm #48894, #23072). Older releases accept EAGLE-3 only for targets
  whose ``model_type`` contains llama, qwen, minicpm or gpt_oss (vllm #31254).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from draftlab.checkpoint.configs import DrafterConfig
from draftlab.engines import ENGINES
from draftlab.errors import DraftlabError

# The module-level names of an EAGLE-3 drafter besides its decoder layer(s).
_TOP_LEVEL = frozenset({"fc.weight", "fc.bias", "norm.weight", "embed_tokens.weight"})
_LAYER = re.compile(r"^layers\.(\d+)\.")


@dataclass(frozen=True)
class EngineLoading:
    """What one engine accepts when it loads a drafter."""

    name: str  # how users spell it
    architectures: frozenset[str]  # drafter classes it recognises in config.architectures
    architecture: str  # the one a fix writes
    config_layouts: frozenset[str]  # "specforge" (flat) and/or "speculators" (nested)
    max_layers: int | None  # decoder layers it supports in a drafter (None: any)
    unknown_weights: str  # "dropped silently" or "fail the load"
    replaces_embed: bool  # overwrites a drafter's own embed_tokens with the target's
    norm_before_residual: bool  # implements the variant that normalises hidden before the residual
    target_model_types: tuple[str, ...] | None  # substrings of supported target model_type
    short_context: str  # what happens when the draft context is shorter than the target's


SGLANG = EngineLoading(
    name="SGLang",
    architectures=frozenset({"LlamaForCausalLMEagle3"}),
    architecture="LlamaForCausalLMEagle3",
    config_layouts=frozenset({"specforge"}),
    max_layers=1,
    unknown_weights="dropped silently",
    replaces_embed=True,
    norm_before_residual=False,
    target_model_types=None,
    short_context=("SGLang refuses to start unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 is set, "
                   "and running past the draft's context that way has caused illegal memory accesses"),
)

VLLM = EngineLoading(
    name="vLLM",
    architectures=frozenset({
        "Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3Qwen2_5vlForCausalLM",
        "Eagle3Qwen3vlForCausalLM", "Eagle3MiniMaxM2ForCausalLM", "Eagle3DeepseekV2ForCausalLM",
        "Eagle3DeepseekV3ForCausalLM",
    }),
    architecture="LlamaForCausalLMEagle3",
    config_layouts=frozenset({"specforge", "speculators"}),
    max_layers=None,
    unknown_weights="fail the load",
    replaces_embed=False,
    norm_before_residual=True,
    target_model_types=("llama", "qwen", "minicpm", "gpt_oss"),
    short_context=("vLLM sizes the drafter's RoPE cache from it, so longer prompts hit device-side "
                   "asserts (or silently wrong positions in eager mode)"),
)


def engine_loading(engine: str) -> EngineLoading:
    """The loading facts of ``engine`` ("sglang" or "vllm")."""
    if engine == "sglang":
        return SGLANG
    if engine == "vllm":
        return VLLM
    raise DraftlabError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def recognises(engine: str, drafter: DrafterConfig) -> bool:
    """Whether ``engine`` will pick its EAGLE-3 model class for this config."""
    facts = engine_loading(engine)
    if drafter.layout not in facts.config_layouts:
        return False
    # vLLM rewrites the architecture of a speculators config itself.
    return drafter.layout == "speculators" or drafter.architecture in facts.architectures


def weight_fate(engine: str, name: str, num_layers: int) -> str:
    """What ``engine`` does with a stored tensor: "bound", "ignored" (by design) or "unused".

    "unused" means the engine never binds it: SGLang drops it silently, vLLM fails the load.
    """
    if name.endswith("t2d"):
        return "ignored"
    if name.endswith("d2t"):
        return "bound"
    if name == "lm_head.weight":
        return "bound"
    bare = name.removeprefix("model.")
    if bare in _TOP_LEVEL:
        return "bound"
    if engine == "sglang":
        return "bound" if bare.startswith("midlayer.") else "unused"
    if engine == "vllm":
        if bare.startswith("midlayer."):
            return "bound"
        layer = _LAYER.match(bare)
        return "bound" if layer and int(layer.group(1)) < num_layers else "unused"
    raise DraftlabError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def bound_name(engine: str, name: str) -> str | None:
    """The name under which ``engine`` would bind an unused tensor, if a rename can rescue it."""
    if engine == "sglang":
        bare = name.removeprefix("model.")
        if bare.startswith("layers.0."):
            return "midlayer." + bare.removeprefix("layers.0.")
    return None


def replaces_embedding(engine: str, drafter: DrafterConfig) -> bool:
    """Whether ``engine`` overwrites the drafter's own ``embed_tokens`` with the target's."""
    return engine_loading(engine).replaces_embed and drafter.target_hidden_size == drafter.hidden_size


def supports_target(engine: str, target_model_type: str) -> bool:
    """Whether ``engine`` (in releases with a target allow-list) accepts EAGLE-3 for this target."""
    allowed = engine_loading(engine).target_model_types
    return allowed is None or any(kind in target_model_type for kind in allowed)
