"""Typed views of target and drafter configs, normalised across families and layouts.

Targets: the Hugging Face causal-LM families used with EAGLE-3 (Llama, Qwen2/Qwen3 dense and MoE,
Mistral, DeepseekV3 / Kimi-K2 with MLA and MoE, gpt-oss); a text model nested under
``text_config`` (multimodal Kimi-K2.5) is read through. Drafters: the SpecForge / EAGLE / SGLang
layout (``LlamaForCausalLMEagle3``, ``midlayer.*``) and the vLLM speculators layout
(``speculators_config``, ``transformer_layer_config``, ``layers.0.*``).

RoPE settings are read from both spellings (:mod:`draftlab.checkpoint.rope`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from draftlab.checkpoint.reader import Checkpoint
from draftlab.checkpoint.rope import Rope
from draftlab.checkpoint.variants import Variant, read_variant, truthy
from draftlab.errors import DraftlabError


def _is_eagle3_architecture(name: str) -> bool:
    """EAGLE-3 drafter class names all carry "Eagle3" (LlamaForCausalLMEagle3, Eagle3Speculator, ...)."""
    return "eagle3" in name.lower()


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language-model part of a config (``text_config`` for multimodal wrappers)."""
    inner = config.get("text_config")
    if isinstance(inner, dict) and "hidden_size" in inner:
        return {**inner, "architectures": inner.get("architectures") or config.get("architectures")}
    return config


def _check_architectures(config: dict[str, Any]) -> None:
    """``architectures`` is a list of class names (every loader indexes and iterates it)."""
    value = config.get("architectures")
    if value is not None and not (isinstance(value, list) and all(isinstance(a, str) for a in value)):
        raise DraftlabError(f"config field 'architectures' is {value!r}, not a list of class names")


def _required(cfg: dict[str, Any], key: str, where: str = "") -> int:
    value = cfg.get(key)
    if type(value) is not int or value <= 0:
        found = "is missing" if value is None else f"is {value!r}, not a positive integer"
        raise DraftlabError(f"config field {where}{key!r} {found}")
    return value


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def _dtype(cfg: dict[str, Any]) -> str | None:
    value = _first(cfg, "torch_dtype", "dtype")
    return str(value).removeprefix("torch.") if value is not None else None


@dataclass(frozen=True)
class TargetConfig:
    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int | None
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    attention: str  # "MHA", "GQA" or "MLA"
    num_experts: int | None  # routed experts; None for dense models
    experts_per_token: int | None
    num_shared_experts: int | None
    moe_intermediate_size: int | None
    rope: Rope
    dtype: str | None
    bos_token_id: int | None
    eos_token_id: int | list[int] | None
    tie_word_embeddings: bool

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> TargetConfig:
        _check_architectures(config)
        cfg = text_config(config)
        where = "text_config." if cfg is not config else ""
        heads = _required(cfg, "num_attention_heads", where)
        kv_heads = int(_first(cfg, "num_key_value_heads", default=heads))
        hidden = _required(cfg, "hidden_size", where)
        mla = cfg.get("kv_lora_rank") is not None
        attention = "MLA" if mla else ("MHA" if kv_heads == heads else "GQA")
        head_dim = _first(cfg, "head_dim", default=None)
        if mla:
            head_dim = int(cfg.get("qk_nope_head_dim", 0)) + int(cfg.get("qk_rope_head_dim", 0))
        experts = _first(cfg, "n_routed_experts", "num_experts", "num_local_experts")
        return cls(
            architecture=(cfg.get("architectures") or ["?"])[0],
            model_type=str(cfg.get("model_type", "?")),
            num_layers=_required(cfg, "num_hidden_layers", where),
            hidden_size=hidden,
            vocab_size=_required(cfg, "vocab_size", where),
            max_position_embeddings=_first(cfg, "max_position_embeddings"),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=int(head_dim) if head_dim else (hidden // heads if heads else 0),
            attention=attention,
            num_experts=int(experts) if experts else None,
            experts_per_token=_first(cfg, "num_experts_per_tok", "num_experts_per_token", "experts_per_token") if experts else None,
            num_shared_experts=_first(cfg, "n_shared_experts", "num_shared_experts") if experts else None,
            moe_intermediate_size=_first(cfg, "moe_intermediate_size") if experts else None,
            rope=Rope.from_config(cfg),
            dtype=_dtype(cfg) or _dtype(config),
            bos_token_id=_first(cfg, "bos_token_id", default=config.get("bos_token_id")),
            eos_token_id=_first(cfg, "eos_token_id", default=config.get("eos_token_id")),
            tie_word_embeddings=bool(_first(cfg, "tie_word_embeddings", default=config.get("tie_word_embeddings", False))),
        )


@dataclass(frozen=True)
class DrafterConfig:
    """An EAGLE-3 drafter's config. ``layer_config`` is the dict holding the decoder-layer fields."""

    layout: str  # "specforge" (SpecForge / EAGLE / SGLang) or "speculators" (vLLM speculators)
    architecture: str
    hidden_size: int
    target_hidden_size: int
    vocab_size: int
    draft_vocab_size: int
    draft_vocab_size_set: bool  # False when the config leaves it null (SGLang then shares the target's head)
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    max_position_embeddings: int | None
    rope: Rope
    eagle_config_aux_ids: list[int] | None  # eagle_config.eagle_aux_hidden_state_layer_ids (SGLang reads these)
    top_level_aux_ids: list[int] | None  # eagle_aux_hidden_state_layer_ids at the top level (vLLM reads these)
    dtype: str | None
    bos_token_id: int | None
    eos_token_id: int | list[int] | None
    tie_word_embeddings: bool
    norm_before_residual: bool
    variant: Variant  # norm_before_fc, fc_norm, norm_output, MLA (checkpoint/variants.py)
    layer_config: dict[str, Any]
    # the sliding window each decoder layer was trained with (None: full attention), as the config states it
    # (``layer_types[i] == "sliding_attention"`` with ``sliding_window``); which engine applies it: engines/window.py
    layer_windows: tuple[int | None, ...] = ()
    layer_kind: str = "llama"  # the decoder layer's model_type: "llama", or "qwen3" (per-head q/k norms)

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> DrafterConfig:
        _check_architectures(config)
        speculators = "speculators_config" in config or "speculators_model_type" in config
        layer = config.get("transformer_layer_config") if speculators else config
        if not isinstance(layer, dict):
            raise DraftlabError("config field 'transformer_layer_config' is missing or not an object")
        where = "transformer_layer_config." if speculators else ""
        hidden = _required(layer, "hidden_size", where)
        heads = _required(layer, "num_attention_heads", where)
        vocab = _required(layer, "vocab_size", where)
        draft_vocab = _first(config, "draft_vocab_size")
        eagle_cfg = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
        variant = read_variant(config, layer)
        head_dim = _first(layer, "head_dim")
        kv_heads = int(_first(layer, "num_key_value_heads", default=heads))
        if variant.mla is not None:  # MLA: a key per head, of width nope + rope (head_dim in DeepSeek configs is rope)
            head_dim, kv_heads = variant.mla.qk_head_dim, heads
        return cls(
            layout="speculators" if speculators else "specforge",
            architecture=(config.get("architectures") or ["?"])[0],
            hidden_size=hidden,
            target_hidden_size=int(_first(config, "target_hidden_size", default=hidden)),
            vocab_size=vocab,
            draft_vocab_size=int(draft_vocab) if draft_vocab is not None else vocab,
            draft_vocab_size_set=draft_vocab is not None,
            num_layers=int(_first(layer, "num_hidden_layers", default=1)),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=int(head_dim) if head_dim else (hidden // heads if heads else 0),
            intermediate_size=int(_first(layer, "intermediate_size", default=0)),
            rms_norm_eps=float(_first(layer, "rms_norm_eps", default=1e-6)),
            max_position_embeddings=_first(layer, "max_position_embeddings"),
            rope=Rope.from_config(layer),
            eagle_config_aux_ids=_int_list(eagle_cfg.get("eagle_aux_hidden_state_layer_ids")),
            top_level_aux_ids=_int_list(config.get("eagle_aux_hidden_state_layer_ids")),
            dtype=_dtype(config) or _dtype(layer),
            bos_token_id=_first(layer, "bos_token_id", default=config.get("bos_token_id")),
            eos_token_id=_first(layer, "eos_token_id", default=config.get("eos_token_id")),
            tie_word_embeddings=bool(_first(layer, "tie_word_embeddings", default=False)),
            # vLLM's speculators translation defaults it to True; flat configs default to False.
            norm_before_residual=bool(config.get("norm_before_residual", speculators)),
            variant=variant,
            layer_config=layer,
            layer_windows=layer_windows(layer, int(_first(layer, "num_hidden_layers", default=1))),
            layer_kind=str(layer.get("model_type") or "llama") if speculators else "llama",
        )

    @property
    def sliding_window(self) -> int | None:
        """The window the drafter was trained with (None: every layer attends to the whole context)."""
        return next((w for w in self.layer_windows if w is not None), None)


def layer_windows(layer: dict[str, Any], num_layers: int) -> tuple[int | None, ...]:
    """Each decoder layer's sliding window, read as transformers and vLLM's drafters read it: ``layer_types[i]``
    ``"sliding_attention"`` takes ``sliding_window``; without ``layer_types``, ``use_sliding_window: true`` puts
    every layer on it (Qwen's spelling). None: full attention."""
    window = layer.get("sliding_window")
    if type(window) is not int or window <= 0:
        return (None,) * num_layers
    types = layer.get("layer_types")
    if isinstance(types, list) and types:
        return tuple(window if i < len(types) and types[i] == "sliding_attention" else None
                     for i in range(num_layers))
    return (window if truthy(layer.get("use_sliding_window")) else None,) * num_layers


def _int_list(value: Any) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
        return None
    return list(value)


def is_drafter(ckpt: Checkpoint) -> bool:
    """A drafter by its config (architecture or speculators fields) or its tensor names."""
    cfg = ckpt.config
    if "speculators_config" in cfg or "speculators_model_type" in cfg:
        return True
    architectures = cfg.get("architectures")
    if isinstance(architectures, list) and any(isinstance(a, str) and _is_eagle3_architecture(a)
                                               for a in architectures):
        return True
    names = ckpt.tensors
    return "fc.weight" in names and any(n.startswith(("midlayer.", "layers.0.")) for n in names)


def target_config(ckpt: Checkpoint) -> TargetConfig:
    """The checkpoint's config read as a target; any unusable field raises naming config.json."""
    return _parse(ckpt, TargetConfig.from_dict)


def drafter_config(ckpt: Checkpoint) -> DrafterConfig:
    """The checkpoint's config read as an EAGLE-3 drafter; any unusable field raises naming config.json."""
    return _parse(ckpt, DrafterConfig.from_dict)


def _parse(ckpt: Checkpoint, parse: Any) -> Any:
    try:
        return parse(ckpt.config)
    except DraftlabError as exc:
        raise DraftlabError(str(exc), path=ckpt.config_path) from None
    except (TypeError, ValueError, KeyError) as exc:
        raise DraftlabError(f"config has a field of the wrong type ({exc})", path=ckpt.config_path) from None
