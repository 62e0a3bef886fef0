"""Which EAGLE-3 variant a drafter folder holds, and what in it draftlab cannot compute.

The variants (``../shared/reference/drafter-variants.md``, from the engines' own code): the flags of
:data:`FLAGS` (``norm_before_fc``, EAGLE-3.1's ``fc_norm`` and ``norm_output``), each described once
there (where each layout keeps it, the tensors it brings, what it computes), and MLA drafters
(``Eagle3DeepseekV2ForCausalLM``, alias ``Eagle3DeepseekV3ForCausalLM``) for DeepSeek-V3 / Kimi targets:
MLA attention whose down-projections take the 2H concat, a dense MLP. The checker
(:mod:`draftlab.compat.variants`), the runtime (:mod:`draftlab.models.drafter`), the converter and the
engines' flag readings iterate :data:`FLAGS`; the releases that read each flag, and where, are in
:mod:`draftlab.engines.releases`.

Everything draftlab computes is named here, once: :data:`UNDERSTOOD_KEYS` lists every config key it
reads or knows leaves the function unchanged, and :func:`unsupported` names anything else that would
change what the drafter computes (an MoE FFN, an unknown architecture or flag, a flag without its
tensors or tensors without their flag). ``inspect`` shows those, ``check`` makes them errors, and
every command that runs a drafter refuses them. Reads configs and tensor names only (no torch).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from draftlab.checkpoint.rope import Rope
from draftlab.errors import DraftlabError

LLAMA_ARCHITECTURES = frozenset({
    "LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Qwen2_5vlForCausalLM", "Eagle3Qwen3vlForCausalLM",
    "Eagle3MiniMaxM2ForCausalLM",
})
MLA_ARCHITECTURES = frozenset({"Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"})


def lookup(config: Mapping[str, Any], place: str) -> Any:
    """The value at a dotted ``place`` of ``config`` (None when absent)."""
    node: Any = config
    for part in place.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def truthy(value: Any) -> bool:
    """A flag as the engines read it: Python truthiness of the config attribute (``getattr(config, key, False)``
    in SGLang's and vLLM's drafters), so the string ``"false"`` turns a flag on and ``0`` leaves it off;
    draftlab's runtime reads every flag this way too (``check`` names the values that are not booleans)."""
    return bool(value)


def first_present(config: Mapping[str, Any], places: Iterable[str]) -> Any:
    """The value at the first of ``places`` that ``config`` holds (None when none): a key that is present
    decides, even when false, as the engines look keys up."""
    return next((value for value in (lookup(config, p) for p in places) if value is not None), None)


@dataclass(frozen=True)
class VariantFlag:
    """One variant flag of an EAGLE-3 drafter: where each config layout keeps it, the module and tensors
    it adds, what it computes. :class:`Variant` holds the flag under its ``name``."""

    name: str  # the key; the speculators layout keeps it at its top level
    flat: tuple[str, ...]  # where a flat (HF / SpecForge / SGLang) config keeps it, dotted; the first present decides
    computes: str
    legacy: tuple[str, ...] = ()  # SGLang's older spellings of the key, which set it when true
    module: str | None = None  # the norm it adds before fc, a drafter module: its tensors are "{module}.*"
    per_aux: bool = False  # one RMSNorm per aux feature ("{module}.{i}.weight", T wide), else one over the concat
    legacy_tensors: tuple[str, ...] = ()  # SGLang's older names of "{module}.{i}", in order of i

    @property
    def places(self) -> tuple[str, ...]:
        """Every place draftlab finds the flag set, in any layout (the flat places, then the legacy keys)."""
        return self.flat + self.legacy

    def is_set(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config`` sets the flag, in either layout."""
        return truthy(first_present(config, self.flat)) or any(truthy(lookup(config, p)) for p in self.legacy)

    def not_boolean(self, config: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """The places where ``config`` gives the flag a value that is not a JSON boolean (nor null)."""
        return [(p, v) for p in self.places if (v := lookup(config, p)) is not None and not isinstance(v, bool)]

    @property
    def tensors(self) -> str:
        """Its tensors as a message names them (``input_norm.weight``, ``fc_norm.{i}.weight``)."""
        return f"{self.module}.{{i}}.weight" if self.per_aux else f"{self.module}.weight"

    def weights(self, aux: int, width: int) -> dict[str, tuple[int, ...]]:
        """The module's weights and their shapes, for ``aux`` features of ``width`` (T) each."""
        if self.per_aux:
            return {f"{self.module}.{i}.weight": (width,) for i in range(aux)}
        return {f"{self.module}.weight": (aux * width,)}

    def owns(self, name: str) -> bool:
        """Whether the canonical tensor ``name`` belongs to the flag's module."""
        return self.module is not None and name.startswith(self.module + ".")


# The variant flags, in the order the engines apply their modules (input_norm, then fc_norm, before fc).
FLAGS = (
    VariantFlag("norm_before_fc", flat=("eagle_config.norm_before_fc", "norm_before_fc"),
                computes="one RMSNorm over the concatenated aux features before fc", module="input_norm"),
    VariantFlag("fc_norm", flat=("fc_norm",), legacy=("use_aux_norm",),
                computes="one RMSNorm per aux feature before fc", module="fc_norm", per_aux=True,
                legacy_tensors=("aux_norm_low", "aux_norm_mid", "aux_norm_high")),
    VariantFlag("norm_output", flat=("norm_output",),
                computes="the next draft step receives norm(out) instead of out (the logits come from norm(out) "
                         "either way)"),
)
FEATURE_NORMS = tuple(f for f in FLAGS if f.module)  # the flags that add a norm of the aux features before fc
FLAG_PLACES = frozenset(p for f in FLAGS for p in f.places)
# The weights of the flags' modules, by canonical name: input_norm.weight, fc_norm.{i}.weight
VARIANT_WEIGHT = re.compile("^(" + "|".join(re.escape(f.module) + (r"\.\d+" if f.per_aux else "")
                                            for f in FEATURE_NORMS) + r")\.weight$")

def boolean_flags(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with every flag value that is not a JSON boolean written as the boolean the engines read
    from it (a config draftlab writes never keeps ``"false"``, which they would read as on)."""
    out = copy.deepcopy(dict(config))
    for flag in FLAGS:
        for place, value in flag.not_boolean(config):
            *parents, key = place.split(".")
            node = out
            for part in parents:
                node = node[part]
            node[key] = truthy(value)
    return out


# Config keys draftlab reads, or knows the engines ignore (metadata, training-only, transformers'
# own bookkeeping). Top level and decoder-layer config alike; ``eagle_config`` has its own list.
UNDERSTOOD_KEYS = frozenset({
    # drafter shape and variant (read by draftlab)
    "architectures", "model_type", "hidden_size", "target_hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "draft_vocab_size", "rms_norm_eps",
    "hidden_act", "attention_bias", "mlp_bias", "max_position_embeddings", "rope_theta", "rope_scaling",
    "rope_parameters", "tie_word_embeddings", "norm_before_residual", "eagle_config",
    "eagle_aux_hidden_state_layer_ids", "num_aux_hidden_states", "draftlab",
    "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
    "layer_types", "sliding_window", "use_sliding_window",  # each layer's attention window
    # MLA dimensions and DeepSeek's RoPE
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "qk_head_dim",
    "rope_interleave",
    # speculators layout
    "speculators_model_type", "speculators_version", "speculators_config", "transformer_layer_config",
    "embed_requires_grad", "auto_map", "parallel_drafting",
    # target-side MoE fields a DeepSeek-derived config carries; the engines' drafters build a dense MLP
    # (MoE is told by its tensors or use_moe, see _moe)
    "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size", "first_k_dense_replace",
    "moe_layer_freq", "n_group", "topk_group", "topk_method", "norm_topk_prob", "routed_scaling_factor",
    "scoring_func", "aux_loss_alpha", "seq_aux", "ep_size", "num_nextn_predict_layers", "output_router_logits",
    "router_aux_loss_coef", "decoder_sparse_step", "mlp_only_layers", "num_experts", "use_moe",
    # settings that do not change the function
    "attention_dropout", "initializer_range", "pretraining_tp", "use_cache", "max_window_layers",
    "transformers_version", "_name_or_path", "target_model_type", "quantization_config",
    "chunk_size_feed_forward", "id2label", "label2id", "is_encoder_decoder", "output_attentions",
    "output_hidden_states", "problem_type", "return_dict", "tf_legacy_loss", "use_bfloat16", "torchscript",
    "add_cross_attention", "tie_encoder_decoder", "pruned_heads", "task_specific_params", "finetuning_task",
    "cross_attention_hidden_size", "decoder_start_token_id", "sep_token_id", "prefix", "tokenizer_class",
    "bad_words_ids", "begin_suppress_tokens", "diversity_penalty", "do_sample", "early_stopping",
    "encoder_no_repeat_ngram_size", "exponential_decay_length_penalty", "forced_bos_token_id",
    "forced_eos_token_id", "length_penalty", "max_length", "min_length", "no_repeat_ngram_size", "num_beam_groups",
    "num_beams", "num_return_sequences", "output_scores", "remove_invalid_values", "repetition_penalty",
    "return_dict_in_generate", "suppress_tokens", "temperature", "top_k", "top_p", "typical_p", "is_decoder",
}) | {p for p in FLAG_PLACES if "." not in p}  # and the variant flags' keys
# ``eagle_config`` entries: aux ids (read in engines/), the variant flags kept there, and TorchSpec's template
# flags that no engine reads.
UNDERSTOOD_EAGLE_CONFIG_KEYS = frozenset({
    "eagle_aux_hidden_state_layer_ids", "use_aux_hidden_state", "layer_ids",
    "use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm",
}) | {p.removeprefix("eagle_config.") for p in FLAG_PLACES if p.startswith("eagle_config.")}
# An unknown key is taken for a switch that changes the function when it is set to true, holds an
# object, or its name speaks of the parts a variant changes.
_FUNCTIONAL_NAME = re.compile(r"norm|moe|expert|router|residual|(^|_)fc(_|$)|gate|aux|sliding|layer_types|mtp|"
                              r"attention_type|attn_type")
_EXPERT_TENSOR = re.compile(r"(^|\.)(experts|shared_experts)\.|\.mlp\.gate\.|\.mlp\.(gate|up|down)_weight$")
# The flags a new drafter of each named variant is written with (``train --variant``).
NEW_DRAFTER_FLAGS: dict[str, dict[str, bool]] = {"eagle3": {}, "eagle3.1": {"fc_norm": True, "norm_output": True}}
# What ``draftlab train`` adds to a norm_output drafter's config: it trained the engines' meaning (the
# next draft step gets norm(out)), which SpecForge v0.3's flat configs cannot say (``check`` warns there)
TRAINED_KEY, NORM_OUTPUT_TRAINED = "draftlab", "next draft step receives norm(out)"


@dataclass(frozen=True)
class MlaDims:
    """Multi-head latent attention sizes (DeepSeek-V3 / Kimi)."""

    q_lora_rank: int | None  # None: q_proj takes the 2H input directly
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class Variant:
    """What the drafter computes beyond the EAGLE-3 of 2025."""

    norm_before_fc: bool
    fc_norm: bool
    norm_output: bool
    mla: MlaDims | None
    # the config says norm_output was trained in the engines' meaning (not part of what it computes)
    norm_output_declared: bool = field(default=False, compare=False)

    @property
    def name(self) -> str:
        """"eagle3", "eagle3.1" (any of the 3.1 norms), with "-mla" for an MLA drafter."""
        base = "eagle3.1" if self.norm_before_fc or self.fc_norm or self.norm_output else "eagle3"
        return base + ("-mla" if self.mla is not None else "")


def read_variant(config: Mapping[str, Any], layer: Mapping[str, Any]) -> Variant:
    """The variant of a drafter config (``layer``: the dict holding the decoder-layer fields)."""
    architecture = (config.get("architectures") or [None])[0]
    mla = None
    if architecture in MLA_ARCHITECTURES or layer.get("kv_lora_rank") is not None:
        mla = MlaDims(q_lora_rank=_int_or_none(layer.get("q_lora_rank")),
                      kv_lora_rank=_positive(layer, "kv_lora_rank"),
                      qk_nope_head_dim=_positive(layer, "qk_nope_head_dim"),
                      qk_rope_head_dim=_positive(layer, "qk_rope_head_dim"),
                      v_head_dim=_positive(layer, "v_head_dim"))
    trained = config.get(TRAINED_KEY)
    declared = isinstance(trained, dict) and trained.get("norm_output") == NORM_OUTPUT_TRAINED
    return Variant(**{f.name: f.is_set(config) for f in FLAGS}, mla=mla, norm_output_declared=declared)


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def _positive(layer: Mapping[str, Any], key: str) -> int:
    value = layer.get(key)
    if type(value) is not int or value <= 0:
        raise DraftlabError(f"config field {key!r} is {value!r}; an MLA drafter needs it as a positive integer")
    return value


def canonical_tensor_name(name: str) -> str:
    """A drafter tensor's name without ``model.``, SGLang's legacy ``aux_norm_*`` as ``fc_norm.{i}``."""
    bare = name.removeprefix("model.")
    for flag in FLAGS:
        for index, legacy in enumerate(flag.legacy_tensors):
            if bare.startswith(legacy + "."):
                return f"{flag.module}.{index}." + bare.removeprefix(legacy + ".")
    return bare


MLA_ROPE_TYPES = ("default", "yarn")  # the RoPE of DeepSeek's MLA layer, in both engines' MLA drafters


@dataclass(frozen=True)
class Unsupported:
    """Something in a drafter folder that changes its function and that draftlab does not compute."""

    field: str  # the config key (dotted when nested) or tensor
    message: str
    # "architecture", "parallel-drafting", "moe", "layers", "mla-dims", "flag-without-tensors", "tensors-without-flag",
    # "unknown-key"
    kind: str


def unsupported(config: Mapping[str, Any], tensor_names: Iterable[str]) -> list[Unsupported]:
    """Every key or tensor of a drafter that draftlab would compute wrong, so refuses."""
    names = [canonical_tensor_name(n) for n in tensor_names]
    speculators = "speculators_config" in config or "speculators_model_type" in config
    layer = config.get("transformer_layer_config") if speculators else config
    layer = layer if isinstance(layer, dict) else {}
    found = [*_architecture(config, speculators, names), *_moe(config, layer, names), *_layers(config, layer),
             *_speculators_extra_layers(names)]
    try:
        found += _flags_and_tensors(read_variant(config, layer), names)
    except DraftlabError as exc:
        found.append(Unsupported("kv_lora_rank", str(exc), "mla-dims"))
    return found + list(_unknown_keys(config, layer, speculators))


def parallel_drafting(config: Mapping[str, Any], tensor_names: Iterable[str]) -> str | None:
    """What makes this a P-EAGLE drafter (parallel drafting), or None: a ``speculators_model_type: peagle``
    config, an HF-layout ``mask_hidden`` tensor (its placeholder feature) or a true ``parallel_drafting`` key."""
    if config.get("speculators_model_type") == "peagle":
        return "speculators_model_type is 'peagle'"
    if any(n.removeprefix("model.") == "mask_hidden" for n in tensor_names):
        return "it stores a mask_hidden tensor (P-EAGLE's placeholder feature)"
    if truthy(config.get("parallel_drafting")):
        return "its config sets parallel_drafting"
    return None


def _architecture(config: Mapping[str, Any], speculators: bool, names: list[str]) -> Iterable[Unsupported]:
    kind = config.get("speculators_model_type")
    peagle = parallel_drafting(config, names)
    if peagle is not None:
        yield Unsupported("speculators_model_type" if kind == "peagle" else "mask_hidden",
                          f"a P-EAGLE drafter ({peagle}): it drafts its tokens in parallel, which draftlab does not "
                          "compute (it runs EAGLE-3 drafters autoregressively)", "parallel-drafting")
    elif speculators and kind not in (None, "eagle3"):
        yield Unsupported("speculators_model_type", f"speculators_model_type is {kind!r}; draftlab computes EAGLE-3 "
                                                    "drafters ('eagle3') only", "architecture")
    architectures = config.get("architectures") or []
    if speculators or not architectures:
        return  # vLLM picks the class of a speculators config itself; a missing name is check's finding
    name = architectures[0]
    if name not in LLAMA_ARCHITECTURES | MLA_ARCHITECTURES:
        yield Unsupported("architectures", f"architecture {name!r} is not an EAGLE-3 drafter draftlab computes "
                                           f"(it knows {', '.join(sorted(LLAMA_ARCHITECTURES | MLA_ARCHITECTURES))})",
                                           "architecture")


def _moe(config: Mapping[str, Any], layer: Mapping[str, Any], names: list[str]) -> Iterable[Unsupported]:
    experts = [n for n in names if _EXPERT_TENSOR.search(n)]
    if experts:
        yield Unsupported(experts[0], f"tensor {experts[0]!r} belongs to an MoE FFN in the drafter; draftlab "
                                      "computes dense drafters only (no released engine serves an MoE EAGLE-3 head)",
                                      "moe")
    elif truthy(layer.get("use_moe")) or truthy(config.get("use_moe")):
        yield Unsupported("use_moe", "use_moe is true: an MoE FFN in the drafter, which draftlab does not compute",
                          "moe")


def _layers(config: Mapping[str, Any], layer: Mapping[str, Any]) -> Iterable[Unsupported]:
    count = layer.get("num_hidden_layers", 1)
    architecture = (config.get("architectures") or [None])[0]
    mla = architecture in MLA_ARCHITECTURES or layer.get("kv_lora_rank") is not None
    if mla and count != 1:
        yield Unsupported("num_hidden_layers", f"num_hidden_layers is {count}; MLA drafters have one decoder layer "
                                               "in both engines, and draftlab computes that one", "layers")
    kind = (Rope.from_config(dict(layer)).scaling or {"rope_type": "default"})["rope_type"]
    if mla and kind not in MLA_ROPE_TYPES:
        yield Unsupported("rope_scaling", f"rope_scaling type {kind!r} in an MLA drafter; the engines serve MLA "
                                          "drafters with plain RoPE or DeepSeek's YaRN only, and draftlab "
                                          "computes those", "mla-dims")
    if kind == "mrope":  # Qwen2.5-VL drafters (Eagle3Qwen2_5vlForCausalLM): served by the engines, not computed here
        yield Unsupported("rope_scaling", "rope_scaling type 'mrope' (the multimodal RoPE of Qwen2.5-VL drafters): "
                                          "the engines serve it, draftlab does not compute it", "layers")


_EXTRA_LAYER = re.compile(r"^layers\.[1-9]\d*\.")


def _speculators_extra_layers(names: list[str]) -> Iterable[Unsupported]:
    """Decoder layers after the first spelled ``layers.{i}.*`` (the speculators layout): vLLM and SGLang run
    multi-layer drafters differently, and draftlab computes SGLang's (``additional_layers.*``) only
    (models/drafter_weights.py)."""
    extra = next((n for n in names if _EXTRA_LAYER.match(n)), None)
    if extra is not None:
        yield Unsupported(extra, f"tensor {extra!r}: multi-layer drafters in the speculators layout (layers.1+) run "
                                 "differently in vLLM and SGLang, and draftlab computes neither", "layers")


def _flags_and_tensors(variant: Variant, names: list[str]) -> list[Unsupported]:
    """A flag set without its module's tensors (the engines would run the norms as initialised), or tensors
    stored without their flag (the engines drop them)."""
    found = []
    for flag in FEATURE_NORMS:
        stored, on = sorted(n for n in names if flag.owns(n)), getattr(variant, flag.name)
        if on and not stored:
            none = f"are no {flag.tensors} tensors" if flag.per_aux else f"is no {flag.tensors}"
            norms = "the norms with their" if flag.per_aux else "the norm with its"
            found.append(Unsupported(flag.name, f"{flag.name} is true but there {none}; the engines would run "
                                                f"{norms} initial weights (ones)", "flag-without-tensors"))
        if stored and not on:
            found.append(Unsupported(stored[0], f"{stored[0]} is stored but {flag.name} is not set; the engines drop "
                                                f"the tensor silently (set {flag.name}: true if the drafter was "
                                                "trained with it)", "tensors-without-flag"))
    return found


def _unknown_keys(config: Mapping[str, Any], layer: Mapping[str, Any], speculators: bool) -> Iterable[Unsupported]:
    places: list[tuple[str, Mapping[str, Any], frozenset[str]]] = [("", config, UNDERSTOOD_KEYS)]
    if speculators:
        places.append(("transformer_layer_config.", layer, UNDERSTOOD_KEYS))
    eagle = config.get("eagle_config")
    if isinstance(eagle, dict):
        places.append(("eagle_config.", eagle, UNDERSTOOD_EAGLE_CONFIG_KEYS))
    for where, fields, known in places:
        for key, value in fields.items():
            if key in known:
                continue
            if value is True or (isinstance(value, dict) and value) or _FUNCTIONAL_NAME.search(key):
                yield Unsupported(where + key, f"config key {where + key!r} ({_short(value)}) is not one draftlab "
                                               "knows; it may change what the drafter computes", "unknown-key")


def unknown_keys(config: Mapping[str, Any]) -> list[str]:
    """Config keys outside :data:`UNDERSTOOD_KEYS` (``inspect`` lists them; :func:`unsupported` refuses those
    that may change the function)."""
    speculators = "speculators_config" in config or "speculators_model_type" in config
    layer = config.get("transformer_layer_config") if speculators else None
    out = [k for k in config if k not in UNDERSTOOD_KEYS]
    if isinstance(layer, dict):
        out += [f"transformer_layer_config.{k}" for k in layer if k not in UNDERSTOOD_KEYS]
    return sorted(out)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
