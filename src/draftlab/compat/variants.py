"""Rules on the drafter variants: what the engine release computes with the flags, tensors and MLA layer.

The silent failures of ``../shared/reference/drafter-variants.md`` section 7, for the release checked:
a flag the release does not read (its tensors dropped), read from elsewhere than it is written,
``norm_output``'s two meanings, vLLM 0.22's MLA drafter that loads ``fc_norm`` without applying it,
SGLang's MLA drafter without ``q_lora_rank``, ``fc`` built for another count of aux features; and
everything :func:`draftlab.checkpoint.variants.unsupported` names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from draftlab.checkpoint.variants import (
    FEATURE_NORMS,
    FLAGS,
    VariantFlag,
    canonical_tensor_name,
    truthy,
    unsupported,
)
from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair
from draftlab.engines.flags import FlagReading, fc_inputs, read_flag
from draftlab.engines.loading import drafter_class, engine_loading
from draftlab.engines.releases import first_release

# unsupported() kinds -> finding codes ("architecture" of a Llama/MLA name is architecture-unknown's)
_CODES = {"architecture": "architecture-unsupported", "moe": "moe-drafter", "layers": "drafter-unsupported",
          "mla-dims": "drafter-unsupported", "flag-without-tensors": "variant-no-tensors",
          "tensors-without-flag": "variant-no-flag", "unknown-key": "unknown-key"}
_FIXES = {"architecture": "use an EAGLE-3 drafter (speculators_model_type eagle3)",
          "moe": "no released SGLang or vLLM serves an MoE EAGLE-3 drafter; use a dense one",
          "layers": "use a drafter of the shape the engines build (one full-attention decoder layer for MLA)",
          "mla-dims": "set the MLA dimensions the drafter was trained with",
          "flag-without-tensors": "add the norm weights saved with the drafter, or remove the flag if it was trained "
                                  "without the norm",
          "tensors-without-flag": "set the flag where the release reads it if the drafter was trained with the norm",
          "unknown-key": "remove the key if it is inert; draftlab refuses what it cannot compute"}


def _tensors(pair: Pair, flag: VariantFlag) -> list[str]:
    return sorted(n for n in pair.drafter_ckpt.tensors if flag.owns(canonical_tensor_name(n)))


def _reading(pair: Pair, flag: str) -> FlagReading:
    return read_flag(pair.release, pair.drafter_ckpt.config, pair.drafter, flag)


def _where_read(pair: Pair, flag: str) -> str:
    """Which releases read ``flag`` for this drafter: a fix that names them."""
    engine, kind = pair.engine, drafter_class(pair.drafter)
    name = engine_loading(engine).name
    here = first_release(engine, flag, kind, pair.drafter.layout)
    other = "specforge" if pair.drafter.layout == "speculators" else "speculators"
    there = first_release(engine, flag, kind, other) if other in engine_loading(engine).config_layouts else None
    if here is None and there is None:
        return (f"no {name} release draftlab knows computes {flag} for {'an MLA' if kind == 'mla' else 'this'} "
                f"drafter; use one trained without it")
    options = [f"serve it with {name} >= {here}"] if here else []
    if there:
        options.append(f"convert it to the {other} layout (draftlab convert), which {name} >= {there} reads it from")
    return ", or ".join(options)


def flags_read(pair: Pair) -> Iterator[Finding]:
    """A flag with a norm before fc (norm_before_fc, fc_norm) set with its tensors stored, but not read by this
    release: dropped silently."""
    for variant_flag in FEATURE_NORMS:
        flag = variant_flag.name
        reading, tensors = _reading(pair, flag), _tensors(pair, variant_flag)
        if not reading.dropped or not tensors:
            continue
        rel, shown = pair.release, ", ".join(tensors[:3]) + (", ..." if len(tensors) > 3 else "")
        fate = ("not applied (vLLM skips them or fails the load on them)" if pair.engine == "vllm" and flag == "fc_norm"
                else "dropped silently")
        lost = (f"so {shown} {'is' if len(tensors) == 1 else 'are'} {fate} and fc gets the features without "
                f"{variant_flag.computes}: acceptance drops with no error")
        if reading.places:
            yield Finding("variant-misplaced", "error", reading.set_at[0],
                          f"{rel.name} reads {flag} from {' then '.join(reading.places)} only, where it is not true "
                          f"(the config sets it at {', '.join(reading.set_at)}), {lost}",
                          f"write {flag}: true at {' and '.join(reading.places)}", fixable=True)
        else:
            kind = "MLA" if drafter_class(pair.drafter) == "mla" else "Llama"
            yield Finding("variant-unread", "error", tensors[0],
                          f"{rel.name} does not read {flag} for a {kind} drafter in the {pair.drafter.layout} "
                          f"layout, {lost}", _where_read(pair, flag))


def norm_output(pair: Pair) -> Iterator[Finding]:
    """norm_output true: read or not, and which of its two meanings the drafter was trained with."""
    reading, rel = _reading(pair, "norm_output"), pair.release
    if not reading.set_at:
        return
    flat = pair.drafter.layout == "specforge"
    if reading.dropped:
        yield Finding("norm-output-unread", "warning" if flat else "error", "norm_output",
                      f"{rel.name} does not read norm_output from the {pair.drafter.layout} layout, so it feeds the "
                      "pre-norm output to the next draft step; an EAGLE-3.1 drafter was trained on norm(out) there, "
                      "so from step 2 on it drafts from a state it never saw"
                      + ("" if not flat else " (a SpecForge v0.3 drafter's norm_output: true is plain EAGLE-3, "
                                             "which this release computes)"),
                      _where_read(pair, "norm_output"))
    elif flat and not pair.drafter.variant.norm_output_declared:
        yield Finding("norm-output-meaning", "warning", "norm_output",
                      f"{rel.name} reads norm_output: true as EAGLE-3.1 does: the next draft step gets norm(out) "
                      "(logits come from norm(out) either way); in SpecForge before PR #879 (v0.3) the same key meant "
                      "'apply the final norm before lm_head', true by default, and training fed the pre-norm output "
                      "forward",
                      "keep it for a speculators- or SpecForge-after-#879-trained drafter; for one trained with "
                      "SpecForge v0.3 or older remove norm_output, so the engine feeds the pre-norm output it was "
                      "trained with")


def mla_requirements(pair: Pair) -> Iterator[Finding]:
    """SGLang's MLA drafter needs q_lora_rank; vLLM 0.22.0's loads fc_norm without applying it."""
    mla, rel = pair.drafter.variant.mla, pair.release
    if mla is None or not rel.mla_architectures:
        return
    if rel.mla_needs_q_lora_rank and mla.q_lora_rank is None:
        yield Finding("mla-q-lora-rank", "error", pair.layer_field("q_lora_rank"),
                      f"{rel.name}'s MLA drafter fuses q_a_proj with kv_a_proj_with_mqa and refuses a config without "
                      "q_lora_rank ('Eagle3 MLA layer requires q_lora_rank')",
                      "serve it with vLLM (its MLA drafter takes q_proj directly), or use a drafter with q_lora_rank")
    if _reading(pair, "fc_norm").read and not rel.mla_fc_norm_applied:
        yield Finding("fc-norm-not-applied", "error", "fc_norm",
                      f"{rel.name}'s MLA drafter loads the fc_norm.{{i}} weights but never applies them (fixed in "
                      "0.23.0, PR #43482): fc gets un-normalised features and acceptance drops with no error",
                      "serve it with vLLM >= 0.23.0")


def fc_aux_count(pair: Pair) -> Iterator[Finding]:
    """vLLM 0.22+'s Llama drafter sizes fc from num_aux_hidden_states or the nested ids, never the top-level ids."""
    built = fc_inputs(pair.release, pair.drafter_ckpt.config, pair.drafter)
    fc, width = pair.tensor("fc.weight"), pair.target.hidden_size
    if built is None or fc is None or len(fc.shape) != 2 or fc.shape[1] % width:
        return
    count, source = built
    stored = fc.shape[1] // width
    if count == stored:
        return
    flat = pair.drafter.layout == "specforge"
    yield Finding("fc-aux-count", "error", "num_aux_hidden_states",
                  f"{pair.release.name} builds fc for {count} aux features (from {source}; it ignores the top-level "
                  f"ids' count) but {fc.name} takes {stored} x {width}: the weights do not fit the layer",
                  f"set num_aux_hidden_states to {stored}" if flat else
                  f"convert it to the specforge layout (draftlab convert) and set num_aux_hidden_states to {stored} "
                  "(check --fix writes it there)", fixable=flat)


_SAYS_FALSE = frozenset({"false", "0", "no", "off", "none", "null", ""})
_SAYS_TRUE = frozenset({"true", "1", "yes", "on"})


def _says(value: Any) -> bool | None:
    """What a non-boolean flag value means to the person who wrote it (None: it does not say)."""
    if isinstance(value, str):
        word = value.strip().lower()
        return False if word in _SAYS_FALSE else True if word in _SAYS_TRUE else None
    return bool(value) if isinstance(value, (int, float)) else None


def flag_values(pair: Pair) -> Iterator[Finding]:
    """A variant flag written as something other than a JSON boolean: the engines branch on its Python truthiness
    (``getattr(config, flag, False)``), so ``"false"`` turns it on; draftlab reads it the same way."""
    config = pair.drafter_ckpt.config
    for flag in FLAGS:
        for place, value in flag.not_boolean(config):
            read = truthy(value)
            reads = f"SGLang, vLLM and draftlab read it by Python truthiness, as {'on' if read else 'off'}"
            if _says(value) == read:
                yield Finding("flag-not-boolean", "warning", place,
                              f"{place} is {value!r}, not a JSON boolean; {reads}, as it says, but other tools "
                              "(SpecForge's training, converters) may not", f"write {place}: {str(read).lower()}",
                              fixable=True)
            else:
                yield Finding("flag-not-boolean", "error", place,
                              f"{place} is {value!r}, not a JSON boolean; {reads}, so the served drafter computes "
                              f"{'with' if read else 'without'} {flag.name} ({flag.computes})",
                              f"write {place}: true if the drafter was trained with {flag.name}, else false "
                              "(a JSON boolean)")


def variant_tensors(pair: Pair) -> Iterator[Finding]:
    """A norm before fc whose stored tensors are not the module the engines build: one ``input_norm`` over the
    n x T concatenation, or one ``fc_norm.{i}`` of width T per captured aux layer; the load fails (a shape
    mismatch, an unexpected weight) or a missing norm runs with its initial weights."""
    aux, width = len(pair.captured.layers), pair.target.hidden_size
    for flag in FEATURE_NORMS:
        stored = {canonical_tensor_name(n): info for n, info in pair.drafter_ckpt.tensors.items()
                  if flag.owns(canonical_tensor_name(n))}
        if not stored or not getattr(pair.drafter.variant, flag.name):
            continue  # nothing stored, or stored without the flag: variant-no-tensors / variant-no-flag
        wanted = flag.weights(aux, width)
        extra = sorted(set(stored) - set(wanted))
        missing = sorted(set(wanted) - set(stored))
        wrong = [n for n in sorted(set(stored) & set(wanted)) if tuple(stored[n].shape) != wanted[n]]
        if not (extra or missing or wrong):
            continue
        if wrong:
            name = wrong[0]
            what = f"{stored[name].name} is {list(stored[name].shape)} but the engines build it {list(wanted[name])}"
        else:
            what = (f"{len(stored)} {flag.tensors} tensors are stored but the engines build {len(wanted)} (one per "
                    f"captured aux layer: {', '.join(sorted(wanted))})")
        yield Finding("variant-tensors", "error", stored[(wrong or extra or sorted(stored))[0]].name,
                      f"{what} ({flag.computes}, for {aux} aux layers of the target's width {width}); the load fails "
                      f"or {'the missing norms run with their initial weights' if missing else 'refuses the weights'}",
                      "use the norm weights saved with this drafter for this target (the same aux layers)")


def not_computable(pair: Pair) -> Iterator[Finding]:
    """Everything in the folder that changes the drafter's function and that draftlab does not compute."""
    for item in unsupported(pair.drafter_ckpt.config, pair.drafter_ckpt.tensors):
        if item.kind == "architecture" and item.field == "architectures":
            continue  # the engine's own recognition: architecture-unknown, with its fix
        if item.kind == "parallel-drafting":
            continue  # per release: architectures.p_eagle
        yield Finding(_CODES[item.kind], "error", item.field, item.message, _FIXES[item.kind])


RULES = (flag_values, variant_tensors, flags_read, norm_output, mla_requirements, fc_aux_count, not_computable)
