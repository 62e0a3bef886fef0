"""``inspect``: what a checkpoint is, from its headers and config alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftlab.checkpoint.configs import (
    TargetConfig,
    drafter_config,
    is_drafter,
    target_config,
)
from draftlab.checkpoint.d2t import validate_d2t
from draftlab.checkpoint.layouts import layer_kind_of
from draftlab.checkpoint.reader import Checkpoint, open_checkpoint
from draftlab.checkpoint.variants import parallel_drafting, unknown_keys, unsupported
from draftlab.engines import aux_layers, default_aux_layers
from draftlab.engines.mtp import shipped_mtp
from draftlab.engines.releases import release, target_family
from draftlab.errors import DraftlabError


@dataclass
class Summary:
    """Fields every checkpoint has."""

    path: Path
    kind: str  # "target" or "drafter"
    layout: str  # "hf" for targets; "specforge" or "speculators" for drafters
    architecture: str
    format: str  # "safetensors" or "pytorch"
    num_parameters: int
    dtype: str | None
    num_tensors: int
    size_on_disk: int  # bytes of the weight files


@dataclass
class TargetSummary(Summary):
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int | None
    attention: str  # "MHA", "GQA" or "MLA"
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    moe: dict[str, int | None] | None  # routed experts, per token, shared, expert width; None if dense
    rope_theta: float | None
    rope_scaling: dict[str, Any] | None
    # the MTP layers it ships (engines/mtp.py ShippedMtp.describe(): layout, prefix, num_layers, count_key,
    # stored_layers, num_tensors, num_parameters); None when it ships none
    mtp: dict[str, Any] | None = None


@dataclass
class DrafterSummary(Summary):
    engine: str
    weight_naming: str  # "midlayer" (SpecForge/SGLang) or "layers.0" (vLLM speculators)
    hidden_size: int
    target_hidden_size: int
    vocab_size: int
    draft_vocab_size: int
    num_layers: int
    aux_layers: list[int] | None  # canonical ids the engine captures; None: the default, which needs L
    aux_source: str  # the config field read, or "default"
    aux_default_rule: str
    aux_rule: str  # how the release read the ids, in words
    aux_family: str  # the target family the ids were read for: "deepseek", "gpt_oss", "llama" or "other"
    aux_family_from: str  # "target" (--target), "drafter" (an MLA drafter serves DeepSeek/Kimi) or "assumed"
    aux_other_readings: dict[str, list[int]]  # with the family assumed: other families' readings that differ
    max_position_embeddings: int | None
    rope_theta: float | None
    rope_scaling: dict[str, Any] | None
    has_d2t: bool
    has_t2d: bool
    d2t_valid: bool | None  # None when there is no d2t
    d2t_problems: list[str]
    has_embed_tokens: bool
    engine_version: str  # the release whose aux rules give aux_layers (--engine-version; default the newest known)
    variant: str  # "eagle3", "eagle3.1", "eagle3-mla" or "eagle3.1-mla"
    norm_before_fc: bool
    fc_norm: bool
    norm_output: bool  # the engines' meaning: the next draft step gets norm(out)
    attention: str  # "MHA", "GQA" or "MLA"
    q_lora_rank: int | None  # the MLA dimensions (None when not MLA; q_lora_rank also when q_proj is used)
    kv_lora_rank: int | None
    qk_nope_head_dim: int | None
    qk_rope_head_dim: int | None
    v_head_dim: int | None
    unsupported: list[dict[str, str]]  # {field, message, kind}: what draftlab (and the engines) would compute wrong
    unknown_keys: list[str]  # config keys draftlab does not know (the ones that may matter are in unsupported)
    decoder_layer: str = "llama"  # the layer the weights are: "llama", "qwen3" (per-head q_norm/k_norm) or "mla"
    sliding_windows: list[int | None] = field(default_factory=list)  # trained, per layer (None: full attention)
    drafting: str = "autoregressive"  # or "parallel (P-EAGLE: <what says so>)"
    target_mtp: dict[str, Any] | None = None  # with --target: the MTP layers the target ships (TargetSummary.mtp)
    captured_layers: list[int] | None = None  # aux_layers under the name every result gives them


InspectResult = TargetSummary | DrafterSummary


def inspect_checkpoint(path: str | Path, engine: str = "sglang", num_target_layers: int | None = None,
                       target: str | Path | None = None, engine_version: str | None = None) -> InspectResult:
    """Describe the checkpoint at ``path``; for a drafter, as ``engine`` at ``engine_version`` (default: the newest
    known) will load it.

    ``num_target_layers`` lets a drafter's default aux layers be resolved to layer indices; ``target``
    (a target folder) gives them and the family whose rules SGLang reads the ids by.
    """
    engine_version = release(engine, engine_version).version  # refuse an unknown engine or release before reading
    ckpt = open_checkpoint(path)
    common = dict(path=Path(path), format=ckpt.format, num_parameters=ckpt.num_parameters, dtype=ckpt.dtype,
                  num_tensors=len(ckpt.tensors), size_on_disk=ckpt.size_on_disk)
    if is_drafter(ckpt):
        summary = _drafter(ckpt, (engine, engine_version), num_target_layers, common,
                           None if target is None else _target(target))
        if target is not None:
            summary.target_mtp = _shipped(open_checkpoint(target))
        return summary
    t = target_config(ckpt)
    moe = None if t.num_experts is None else {
        "num_experts": t.num_experts, "experts_per_token": t.experts_per_token,
        "num_shared_experts": t.num_shared_experts, "moe_intermediate_size": t.moe_intermediate_size}
    return TargetSummary(
        kind="target", layout="hf", architecture=t.architecture, **common, model_type=t.model_type,
        num_layers=t.num_layers, hidden_size=t.hidden_size, vocab_size=t.vocab_size,
        max_position_embeddings=t.max_position_embeddings, attention=t.attention,
        num_attention_heads=t.num_attention_heads, num_key_value_heads=t.num_key_value_heads, head_dim=t.head_dim,
        moe=moe, rope_theta=t.rope.theta, rope_scaling=t.rope.scaling,
        mtp=_shipped(ckpt))


def _shipped(ckpt: Checkpoint) -> dict[str, Any] | None:
    """The MTP layers a target checkpoint ships (engines/mtp.py), as inspect's JSON names them."""
    shipped = shipped_mtp(ckpt.config, {name: info.numel for name, info in ckpt.tensors.items()})
    return None if shipped is None else shipped.describe()


def _target(path: str | Path) -> TargetConfig:
    ckpt = open_checkpoint(path)
    if is_drafter(ckpt):
        raise DraftlabError("is an EAGLE-3 drafter; --target must be the target model", path=path)
    return target_config(ckpt)


def _drafter(ckpt: Checkpoint, deployed: tuple[str, str], num_target_layers: int | None, common: dict[str, Any],
             target: TargetConfig | None) -> DrafterSummary:
    (engine, version), d = deployed, drafter_config(ckpt)
    if target is not None:
        num_target_layers = num_target_layers or target.num_layers
        family, family_from = target_family(target.model_type), "target"
    elif d.variant.mla is not None:  # the engines serve MLA drafters for DeepSeek/Kimi targets only
        family, family_from = "deepseek", "drafter"
    else:
        family, family_from = "llama", "assumed"
    aux = aux_layers(engine, d, num_target_layers or 0, target=target, family=family, version=version)
    layers = aux.layers if aux.source != "default" or num_target_layers else None
    others = {} if family_from != "assumed" or layers is None else {
        other: read.layers for other in ("deepseek", "gpt_oss")
        if (read := aux_layers(engine, d, num_target_layers or 0, family=other, version=version)).layers != layers
        and min(read.layers) >= 0}  # a reading that starts below layer 0 is no drafter for that family
    names = ckpt.tensors
    peagle = parallel_drafting(ckpt.config, names)
    d2t_name = next((n for n in ("d2t", "model.d2t") if n in names), None)
    t2d_name = next((n for n in ("t2d", "model.t2d") if n in names), None)
    problems: list[str] = []
    if d2t_name:
        d2t = ckpt.read_ints(d2t_name)
        t2d = ckpt.read_ints(t2d_name) if t2d_name else None
        problems = validate_d2t(d2t, t2d, d.vocab_size)
        if len(d2t) != d.draft_vocab_size:
            problems.insert(0, f"d2t has {len(d2t)} entries but draft_vocab_size is {d.draft_vocab_size}")
    variant, mla = d.variant, d.variant.mla
    attention = "MLA" if mla else ("MHA" if d.num_key_value_heads == d.num_attention_heads else "GQA")
    naming = "layers.0" if any(n.removeprefix("model.").startswith("layers.") for n in names) else "midlayer"
    rule = f"default: outputs of layers {default_aux_layers(num_target_layers)}" if num_target_layers \
        else "default: outputs of layers [1, L//2 - 1, L - 4] of an L-layer target"
    return DrafterSummary(
        kind="drafter", layout=d.layout, architecture=d.architecture, **common, engine=engine,
        weight_naming=naming, hidden_size=d.hidden_size, target_hidden_size=d.target_hidden_size,
        vocab_size=d.vocab_size, draft_vocab_size=d.draft_vocab_size, num_layers=d.num_layers,
        aux_layers=layers, captured_layers=layers, aux_source=aux.source, aux_default_rule=rule, aux_rule=aux.rule,
        aux_family=family, aux_family_from=family_from, aux_other_readings=others,
        max_position_embeddings=d.max_position_embeddings, rope_theta=d.rope.theta, rope_scaling=d.rope.scaling,
        has_d2t=d2t_name is not None, has_t2d=t2d_name is not None,
        d2t_valid=(not problems) if d2t_name else None, d2t_problems=problems,
        has_embed_tokens=any(n.removeprefix("model.") == "embed_tokens.weight" for n in names),
        engine_version=version, variant=variant.name, norm_before_fc=variant.norm_before_fc,
        fc_norm=variant.fc_norm, norm_output=variant.norm_output, attention=attention,
        q_lora_rank=mla.q_lora_rank if mla else None, kv_lora_rank=mla.kv_lora_rank if mla else None,
        qk_nope_head_dim=mla.qk_nope_head_dim if mla else None, qk_rope_head_dim=mla.qk_rope_head_dim if mla else None,
        v_head_dim=mla.v_head_dim if mla else None,
        unsupported=[{"field": u.field, "message": u.message, "kind": u.kind} for u in unsupported(ckpt.config, names)],
        unknown_keys=unknown_keys(ckpt.config), decoder_layer="mla" if mla else layer_kind_of(names),
        sliding_windows=list(d.layer_windows),
        drafting="autoregressive" if peagle is None else f"parallel (P-EAGLE: {peagle})")
