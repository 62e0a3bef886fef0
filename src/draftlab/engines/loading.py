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
- What changes between releases (drafter classes registered, variant flags, the MLA drafter, aux
  ids, the target allow-list) is in :mod:`draftlab.engines.releases`; the functions here take a
  ``version`` (default: the newest release draftlab knows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from draftlab.checkpoint.configs import DrafterConfig
from draftlab.checkpoint.variants import VARIANT_WEIGHT, canonical_tensor_name
from draftlab.engines.aux_ids import ENGINES
from draftlab.engines.releases import LLAMA_CLASS, MLA_CLASS, release
from draftlab.errors import DraftlabError

# The module-level names of an EAGLE-3 drafter besides its decoder layer(s).
_TOP_LEVEL = frozenset({"fc.weight", "fc.bias", "norm.weight", "embed_tokens.weight"})
_LAYER = re.compile(r"^layers\.(\d+)\.")


@dataclass(frozen=True)
class EngineLoading:
    """What one engine accepts when it loads a drafter, in every release draftlab knows."""

    name: str  # how users spell it
    architecture: str  # the Llama-drafter class a fix writes
    config_layouts: frozenset[str]  # "specforge" (flat) and/or "speculators" (nested)
    max_layers: int | None  # decoder layers it supports in a drafter (None: any)
    unknown_weights: str  # "dropped silently" or "fail the load"
    replaces_embed: bool  # overwrites a drafter's own embed_tokens with the target's
    norm_before_residual: bool  # implements the variant that normalises hidden before the residual
    short_context: str  # what happens when the draft context is shorter than the target's


SGLANG = EngineLoading(
    name="SGLang",
    architecture=LLAMA_CLASS,
    config_layouts=frozenset({"specforge"}),
    max_layers=1,
    unknown_weights="dropped silently",
    replaces_embed=True,
    norm_before_residual=False,
    short_context=("SGLang refuses to start unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 is set, "
                   "and running past the draft's context that way has caused illegal memory accesses"),
)

VLLM = EngineLoading(
    name="vLLM",
    architecture=LLAMA_CLASS,
    config_layouts=frozenset({"specforge", "speculators"}),
    max_layers=None,
    unknown_weights="fail the load",
    replaces_embed=False,
    norm_before_residual=True,
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


def drafter_class(drafter: DrafterConfig) -> str:
    """"mla" for a DeepSeek/Kimi MLA drafter, else "llama" (the engines' two EAGLE-3 drafter models)."""
    return "mla" if drafter.variant.mla is not None else "llama"


def recognises(engine: str, drafter: DrafterConfig, version: str | None = None) -> bool:
    """Whether ``engine`` at ``version`` builds the right EAGLE-3 model class for this config."""
    if drafter.layout not in engine_loading(engine).config_layouts:
        return False
    if drafter.layout == "speculators":  # vLLM picks the (Llama) class of a speculators config itself
        return drafter_class(drafter) == "llama"
    rel = release(engine, version)
    wanted = rel.mla_architectures if drafter_class(drafter) == "mla" else rel.architectures - rel.mla_architectures
    return drafter.architecture in wanted


def fixed_architecture(engine: str, drafter: DrafterConfig, version: str | None = None) -> str | None:
    """The class a fix writes for this drafter (its MLA class for an MLA drafter; None: the release has none)."""
    if drafter_class(drafter) == "llama":
        return engine_loading(engine).architecture
    return MLA_CLASS if release(engine, version).mla_architectures else None


def weight_fate(engine: str, name: str, drafter: DrafterConfig) -> str:
    """What ``engine`` does with a stored tensor: "bound", "ignored" (by design), "variant" or "unused".

    "unused" means the engine never binds it: SGLang drops it silently, vLLM fails the load.
    "variant" is an ``input_norm`` / ``fc_norm.{i}`` tensor, bound only when the release reads its flag
    (compat's variant rules judge those).
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
    if bare == MASK_HIDDEN:  # P-EAGLE's placeholder feature: compat's parallel-drafting rule judges it per release
        return "variant"
    if VARIANT_WEIGHT.match(canonical_tensor_name(name) if engine == "sglang" else bare):
        return "variant"
    if engine == "sglang":
        # the MLA drafter maps ^layers.0. onto its midlayer (kimi_k25_eagle3.py)
        mla_layer = drafter_class(drafter) == "mla" and bare.startswith("layers.0.")
        return "bound" if bare.startswith("midlayer.") or mla_layer else "unused"
    if engine == "vllm":
        if bare.startswith("midlayer."):
            return "bound"
        layer = _LAYER.match(bare)
        return "bound" if layer and int(layer.group(1)) < drafter.num_layers else "unused"
    raise DraftlabError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def bound_name(engine: str, name: str) -> str | None:
    """The name under which ``engine`` would bind an unused tensor, if a rename can rescue it."""
    if engine == "sglang":
        bare = name.removeprefix("model.")
        if bare.startswith("layers.0."):
            return "midlayer." + bare.removeprefix("layers.0.")
    return None


# vLLM speculators/algos.py: from 0.24.0 ``transformer_layer_config.model_type`` picks the layer (qwen3 ->
# Eagle3Qwen3ForCausalLM with per-head q_norm/k_norm, llama -> the Llama drafter, anything else raises
# "Unsupported model_type"); up to 0.23 every speculators eagle3 config becomes Eagle3LlamaForCausalLM.
VLLM_QWEN3_DRAFTER_FIRST = "0.24.0"
SPECULATORS_LAYER_KINDS = ("llama", "qwen3")
# vLLM P-EAGLE (parallel drafting, a ``mask_hidden`` placeholder feature): the classes are registered 0.29.0-0.33.0
# (models/registry.py, speculators/algos.py); 0.34.0 removed them (a ``peagle`` config raises, an HF-layout
# ``mask_hidden`` is skipped with a warning and the drafter runs autoregressively).
VLLM_PEAGLE = ("0.29.0", "0.33.0")
MASK_HIDDEN = "mask_hidden"


def built_layer(engine: str, drafter: DrafterConfig, version: str | None = None) -> tuple[str | None, str]:
    """The decoder layer ``engine`` at ``version`` builds for a (non-MLA) drafter: "llama", "qwen3" or None (it
    refuses the config), and why, naming the engine file."""
    rel = release(engine, version)
    if engine == "sglang":  # llama_eagle3.py: LlamaForCausalLMEagle3 is its only non-MLA EAGLE-3 drafter
        return "llama", f"{rel.name} has no Qwen3 EAGLE-3 drafter: it builds {LLAMA_CLASS}'s Llama layer"
    if drafter.layout != "speculators":
        return "llama", f"{rel.name} builds its Llama drafter (llama_eagle3.py) from a flat config"
    if not rel.at(VLLM_QWEN3_DRAFTER_FIRST):
        return "llama", (f"{rel.name} builds every speculators eagle3 drafter as Eagle3LlamaForCausalLM "
                         f"(speculators/algos.py; the Qwen3 drafter comes in {VLLM_QWEN3_DRAFTER_FIRST})")
    if drafter.layer_kind in SPECULATORS_LAYER_KINDS:
        return drafter.layer_kind, (f"{rel.name} builds the layer transformer_layer_config.model_type names "
                                    f"({drafter.layer_kind!r}; speculators/algos.py)")
    return None, (f"{rel.name} refuses transformer_layer_config.model_type {drafter.layer_kind!r} (\"Unsupported "
                  "model_type\": speculators/algos.py builds 'llama' or 'qwen3')")


def parallel_drafting(engine: str, version: str | None, peagle_config: bool) -> tuple[str, str]:
    """How a release serves a P-EAGLE drafter (a ``speculators_model_type: peagle`` config, else an HF-layout
    drafter with a ``mask_hidden`` tensor): "parallel", "autoregressive" or "refused", and why."""
    rel = release(engine, version)
    if engine == "sglang":
        if peagle_config:
            return "refused", f"{rel.name} reads no speculators config (and registers no P-EAGLE drafter)"
        return "autoregressive", (f"{rel.name}'s llama_eagle3.py drops weights it does not know silently, "
                                  f"{MASK_HIDDEN} among them, and drafts autoregressively (inferred from its loader)")
    first, last = VLLM_PEAGLE
    if rel.at(first) and not rel.at(_after(last)):
        return "parallel", (f"{rel.name} registers the P-EAGLE drafter ({first} to {last}) and drafts in parallel "
                            "(parallel_drafting puts the server on the V1 runner in 0.28-0.33)")
    if rel.at(_after(last)):
        if peagle_config:
            return "refused", f"{rel.name} removed P-EAGLE: a speculators_model_type peagle config raises"
        return "autoregressive", (f"{rel.name} removed P-EAGLE: it skips {MASK_HIDDEN} with a warning and drafts "
                                  "autoregressively, not as the drafter was trained")
    return "refused", (f"{rel.name} registers no P-EAGLE drafter (from {first}): "
                       + ("speculators_model_type peagle is refused" if peagle_config
                          else f"{MASK_HIDDEN} is a weight its Llama drafter does not have, so the load fails"))


def _after(version: str) -> str:
    """The next minor release (``0.33.0`` -> ``0.34.0``)."""
    major, minor, *_ = version.split(".")
    return f"{major}.{int(minor) + 1}.0"


def replaces_embedding(engine: str, drafter: DrafterConfig) -> bool:
    """Whether ``engine`` overwrites the drafter's own ``embed_tokens`` with the target's."""
    return engine_loading(engine).replaces_embed and drafter.target_hidden_size == drafter.hidden_size


def supports_target(engine: str, target_model_type: str, version: str | None = None) -> bool:
    """Whether ``engine`` at ``version`` (where it has a target allow-list) accepts EAGLE-3 for this target."""
    allowed = release(engine, version).target_model_types
    return allowed is None or any(kind in target_model_type for kind in allowed)
