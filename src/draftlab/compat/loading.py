"""Rules on how the engine loads the drafter: class, weight names, layers, dtype, special tokens."""

from __future__ import annotations

from collections.abc import Iterator

from draftlab.checkpoint.reader import INDEX_NAMES
from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair
from draftlab.engines.loading import (
    bound_name,
    drafter_class,
    engine_loading,
    fixed_architecture,
    recognises,
    replaces_embedding,
    supports_target,
    weight_fate,
)
from draftlab.engines.releases import MLA_CLASS, first_mla_release, first_serving
from draftlab.engines.written_config import null_fields
from draftlab.readable import present

_SHOW = 4


def architecture(pair: Pair) -> Iterator[Finding]:
    """The engine picks its EAGLE-3 class from config.architectures (and reads only some layouts)."""
    facts, rel = engine_loading(pair.engine), pair.release
    if recognises(pair.engine, pair.drafter, rel.version):
        return
    mla = drafter_class(pair.drafter) == "mla"
    wanted = fixed_architecture(pair.engine, pair.drafter, rel.version)
    if mla and pair.drafter.layout == "speculators":
        yield Finding("architecture-unknown", "error", "speculators_model_type",
                      "this MLA drafter is in the speculators layout, from which vLLM builds a Llama drafter and "
                      "SGLang builds nothing; no engine reads an MLA drafter from it",
                      f"flatten it into the SpecForge layout with architectures [{MLA_CLASS!r}]",
                      fixable=wanted is not None)
        return
    if mla and wanted is None:
        since = first_mla_release(pair.engine)
        yield Finding("architecture-unknown", "error", "architectures",
                      f"{rel.name} has no MLA EAGLE-3 drafter ({MLA_CLASS} is registered from {facts.name} {since})",
                      f"serve it with {facts.name} >= {since}")
        return
    if pair.drafter.layout not in facts.config_layouts:
        message = (f"this is a {pair.drafter.layout} config (fields nested under transformer_layer_config); "
                   f"{facts.name} reads only flat SpecForge-style configs and will not load it")
        fix = f"flatten the config into the SpecForge layout with architectures [{wanted!r}]"
    elif mla:
        message = (f"{rel.name} does not build its MLA drafter for the architecture {pair.drafter.architecture!r}; "
                   f"this drafter's config has MLA dimensions (kv_lora_rank), so any other class computes something "
                   "else")
        fix = f"set architectures to [{wanted!r}]"
    else:
        message = f"{rel.name} does not recognise the architecture {pair.drafter.architecture!r} as an EAGLE-3 drafter"
        fix = f"set architectures to [{wanted!r}]"
    yield Finding("architecture-unknown", "error", "architectures", message, fix, fixable=True)


def weight_names(pair: Pair) -> Iterator[Finding]:
    """Tensors the engine never binds are lost (SGLang) or fail the load (vLLM)."""
    facts = engine_loading(pair.engine)
    unused = [n for n in pair.drafter_ckpt.tensors if weight_fate(pair.engine, n, pair.drafter) == "unused"]
    if not unused:
        return
    renames = {n: bound_name(pair.engine, n) for n in unused}
    rescuable = all(renames.values())
    shown = ", ".join(unused[:_SHOW]) + (", ..." if len(unused) > _SHOW else "")
    first_fix = next(iter(renames.items()))
    yield Finding("weight-names", "error", unused[0],
                  f"{facts.name} does not bind {len(unused)} tensors ({shown}); they would be "
                  f"{facts.unknown_weights}",
                  f"rename them (e.g. {first_fix[0]} -> {first_fix[1]})" if rescuable
                  else "remove or rename them to the names the engine expects", fixable=rescuable)


def embedding(pair: Pair) -> Iterator[Finding]:
    """SGLang overwrites a drafter's own embed_tokens with the target's."""
    embed = pair.tensor("embed_tokens.weight")
    if embed is not None and replaces_embedding(pair.engine, pair.drafter):
        yield Finding("embed-replaced", "info", embed.name,
                      f"{engine_loading(pair.engine).name} replaces the drafter's embed_tokens with the target's",
                      "nothing to do if it was trained with the target's (frozen) embedding, as SpecForge does")


def num_layers(pair: Pair) -> Iterator[Finding]:
    """SGLang's EAGLE-3 drafter has exactly one decoder layer."""
    limit = engine_loading(pair.engine).max_layers
    if limit is not None and pair.drafter.num_layers > limit:
        yield Finding("num-layers", "error", pair.layer_field("num_hidden_layers"),
                      f"the drafter has {pair.drafter.num_layers} decoder layers; "
                      f"{engine_loading(pair.engine).name} supports {limit}",
                      "serve it with an engine that supports multi-layer drafters (vLLM)")


def residual_order(pair: Pair) -> Iterator[Finding]:
    """A drafter trained with norm_before_residual computes another function where it is unsupported."""
    facts = engine_loading(pair.engine)
    if pair.drafter.norm_before_residual and not facts.norm_before_residual:
        yield Finding("norm-before-residual", "error", "norm_before_residual",
                      f"the drafter was trained with norm_before_residual (the speculators default); {facts.name}'s "
                      "layer adds the residual before hidden_norm, so it computes a different function and "
                      "acceptance collapses silently",
                      "serve it with vLLM, or use a drafter trained without norm_before_residual")


def target_supported(pair: Pair) -> Iterator[Finding]:
    """Older vLLM releases accept EAGLE-3 only for some target families."""
    if not supports_target(pair.engine, pair.target.model_type, pair.release.version):
        allowed = ", ".join(pair.release.target_model_types or ())
        yield Finding("target-unsupported", "warning", "model_type",
                      f"the target's model_type is {pair.target.model_type!r}; {pair.release.name} "
                      f"has an EAGLE-3 allow-list that accepts only {allowed}",
                      "use a release that lists this family, or check the engine's release notes")


def target_served(pair: Pair) -> Iterator[Finding]:
    """A target family the release serves no EAGLE-3 for (SGLang before 0.5.22 on Qwen3.5/3.6 targets)."""
    rel, model_type = pair.release, pair.target.model_type
    why = rel.unserved_because(model_type)
    if why is not None:
        yield Finding("target-unserved", "error", "model_type",
                      f"the target's model_type is {model_type!r}; {rel.name} captures no aux hidden states for it "
                      f"({why})", f"serve it with {engine_loading(pair.engine).name} >= "
                      f"{first_serving(pair.engine, model_type)}")


def dtype(pair: Pair) -> Iterator[Finding]:
    """A drafter stored in another precision is cast to the serving dtype."""
    mine = pair.drafter_ckpt.dtype
    theirs = pair.target.dtype or pair.target_ckpt.dtype
    if mine and theirs and mine != theirs:
        yield Finding("dtype-mismatch", "warning", "torch_dtype",
                      f"the drafter's weights are {mine} and the target's are {theirs}; the engine casts the "
                      f"drafter to the serving dtype",
                      "usually harmless; if acceptance is low, compare with a drafter trained in the target's dtype")


def special_tokens(pair: Pair) -> Iterator[Finding]:
    """bos/eos ids come from the target's tokenizer; a different id hints at another tokenizer."""
    for key, mine, theirs in (("bos_token_id", pair.drafter.bos_token_id, pair.target.bos_token_id),
                              ("eos_token_id", pair.drafter.eos_token_id, pair.target.eos_token_id)):
        if mine is not None and theirs is not None and mine != theirs:
            yield Finding("token-ids", "warning", pair.layer_field(key),
                          f"the drafter's {key} is {mine} but the target's is {theirs}",
                          f"set {key} to {theirs} (and check that both use the same tokenizer)", fixable=True)


def null_config_fields(pair: Pair) -> Iterator[Finding]:
    """A null where the loaders expect a value or no key (speculators writes target_hidden_size null)."""
    keys = null_fields(pair.drafter_ckpt.config)
    if not keys:
        return
    why = []
    if "target_hidden_size" in keys:
        why.append("SGLang, vLLM and SpecForge compute target_hidden_size * 3 whenever the key exists, so "
                   "building the drafter fails with a TypeError")
    if "norm_output" in keys:
        why.append("SpecForge reads a null norm_output as false and computes logits without the final norm")
    yield Finding("config-null", "error" if "target_hidden_size" in keys else "warning", keys[0],
                  f"config.json sets {' and '.join(keys)} to null; {'; '.join(why)}",
                  "remove the null keys (set target_hidden_size to the target's hidden size when it differs "
                  "from hidden_size)", fixable=True)


def final_norm_skipped(pair: Pair) -> Iterator[Finding]:
    """SpecForge's norm_output false skips the final norm; the engines always apply it."""
    config = pair.drafter_ckpt.config
    if "transformer_layer_config" not in config and config.get("norm_output") is False:
        yield Finding("norm-output", "warning", "norm_output",
                      "norm_output is false: SpecForge then computes logits without the final norm, while SGLang "
                      "and vLLM always apply it, so training (or SpecForge's evaluation) and serving disagree; "
                      "speculators' norm_output means something else, and a flattened speculators config "
                      "carries its false over",
                      "remove norm_output unless the drafter was trained in SpecForge with norm_output false")


def stray_weights(pair: Pair) -> Iterator[Finding]:
    """Without an index the engines load every ``*.safetensors`` of the folder, not only the checkpoint's file."""
    ckpt = pair.drafter_ckpt
    if any(present(ckpt.path / name) for name in INDEX_NAMES):
        return  # the engines load what the index names
    loaded = set(ckpt.weight_files)
    stray = sorted(p.name for p in ckpt.path.glob("*.safetensors") if p not in loaded)
    if not stray:
        return
    shown = ", ".join(stray[:_SHOW]) + (", ..." if len(stray) > _SHOW else "")
    yield Finding("stray-weights", "error", stray[0],
                  f"{len(stray)} other *.safetensors file(s) beside {ckpt.weight_files[0].name} ({shown}): "
                  f"{engine_loading(pair.engine).name} loads every *.safetensors of a folder without an index, "
                  "so their tensors would be loaded too (or instead of a .bin)",
                  f"move {stray[0]} out of the drafter folder (check --fix leaves it out of OUT)", fixable=True)


RULES = (null_config_fields, final_norm_skipped, architecture, weight_names, embedding, num_layers, residual_order,
         target_supported, target_served, dtype,
         special_tokens, stray_weights)
