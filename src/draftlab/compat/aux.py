"""Rules on the aux layers: which target layers the engine captures for the drafter."""

from __future__ import annotations

from collections.abc import Iterator

from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair
from draftlab.engines import ENGINES, aux_field, aux_layers, capturable, default_aux_layers, written_aux_ids
from draftlab.engines.loading import engine_loading
from draftlab.errors import DraftlabError


def _name(engine: str) -> str:
    return engine_loading(engine).name


def _field(source_engine: str | None) -> str:
    return aux_field(source_engine) if source_engine else "eagle_aux_hidden_state_layer_ids"


def _source_engine(source: str) -> str | None:
    return {"eagle_config": "sglang", "top-level": "vllm"}.get(source)


def out_of_range(pair: Pair) -> Iterator[Finding]:
    """Engines capture the input of layer k + 1, so k must lie in [0, L - 2]."""
    captured, num_layers = pair.captured, pair.target.num_layers
    ok = capturable(num_layers, pair.engine, target=pair.target, version=pair.release.version)
    bad = [k for k in captured.layers if k not in ok]
    if bad:
        yield Finding("aux-out-of-range", "error", _field(_source_engine(captured.source)),
                      f"{pair.release.name} would capture the outputs of layers {captured.layers} but the target "
                      f"has {num_layers} layers and only outputs 0..{ok.stop - 1} can be captured "
                      f"(offending: {bad}); the drafter would get fewer features than fc expects",
                      "this drafter was trained for a deeper target; use one trained for this target")


def duplicates(pair: Pair) -> Iterator[Finding]:
    """A layer named twice is captured once, so fc gets fewer features than it expects."""
    layers = pair.captured.layers
    if len(set(layers)) != len(layers):
        yield Finding("aux-duplicate", "error", _field(_source_engine(pair.captured.source)),
                      f"the aux layers {layers} name a layer twice; it is captured once, so fc gets "
                      f"{len(set(layers))} features instead of {len(layers)}",
                      "set distinct layer ids (the ones the drafter was trained on)")


def convention(pair: Pair) -> Iterator[Finding]:
    """The engine must capture the layers the drafter was trained on."""
    captured, intended = pair.captured, pair.intended
    if captured.layers == intended.layers:
        return
    engine, name = pair.engine, pair.release.name
    intended_from = _source_engine(intended.source)
    if captured.source == "default":
        why = (f"{aux_field(engine)} is not set, so {name} ignores the ids in "
               f"{_field(intended_from)} ({_name(intended_from)}'s convention) and captures its default "
               f"layers {captured.layers}")
    else:
        why = (f"{captured.rule}, so it reads {_field(_source_engine(captured.source))} = {captured.raw_ids} as "
               f"outputs of layers {captured.layers}, but {_field(intended_from)} (the field this "
               f"{pair.drafter.layout} drafter was trained with, read as the newest release reads it) names "
               f"layers {intended.layers}")
    try:
        written = written_aux_ids(engine, intended.layers, target=pair.target, version=pair.release.version)
    except DraftlabError as exc:
        yield Finding("aux-convention", "error", aux_field(engine), f"{why}; {exc}",
                      "serve it with another release or engine, or use a drafter trained on other layers")
        return
    yield Finding("aux-convention", "error", aux_field(engine),
                  f"{why}; the drafter was trained on the outputs of layers {intended.layers}",
                  f"set {aux_field(engine)} to {written}", fixable=True)


def runner_dependent(pair: Pair) -> Iterator[Finding]:
    """vLLM 0.22-0.33 have two runners that read the ids differently: the V1 runner falls back to the
    nested eagle_config ids, Model Runner V2 never reads them (VLLM_USE_V2_MODEL_RUNNER picks one)."""
    rel = pair.release
    if len(rel.runners) < 2:
        return
    seen = {runner: aux_layers(pair.engine, pair.drafter, pair.target.num_layers, target=pair.target,
                               version=rel.version, runner=runner) for runner in rel.runners}
    if seen["V1"].layers == seen["MRV2"].layers:
        return
    written = written_aux_ids("vllm", pair.intended.layers)
    forced = rel.v1_forced_by()
    yield Finding("aux-runner", "warning", aux_field("vllm"),
                  f"{rel.name}'s V1 runner reads the nested eagle_config ids {seen['V1'].raw_ids} (outputs of layers "
                  f"{seen['V1'].layers}) but its Model Runner V2 ignores them and captures {seen['MRV2'].layers}; "
                  "which runner serves depends on the target and VLLM_USE_V2_MODEL_RUNNER"
                  + (f" ({', '.join(forced)} force V1)" if forced else ""),
                  f"set the top-level {aux_field('vllm')} to {written}: both runners read it first", fixable=True)


def other_engine(pair: Pair) -> Iterator[Finding]:
    """The same folder served by the other engine should capture the same layers."""
    intended = pair.intended
    for other in ENGINES:
        facts = engine_loading(other)
        if other == pair.engine or pair.drafter.layout not in facts.config_layouts:
            continue
        seen = aux_layers(other, pair.drafter, pair.target.num_layers, target=pair.target)
        if seen.layers != intended.layers:
            try:
                fix = (f"set {aux_field(other)} to {written_aux_ids(other, intended.layers, target=pair.target)} "
                       "so both engines agree")
            except DraftlabError as exc:
                fix = str(exc)
            yield Finding("aux-other-engine", "info", aux_field(other),
                          f"served by {facts.name} (its newest release), this folder would capture layers "
                          f"{seen.layers}, not {intended.layers}", fix, fixable=fix.startswith("set "))


def default_used(pair: Pair) -> Iterator[Finding]:
    """No ids set: both engines fall back to EAGLE's default layers.

    In a speculators-layout drafter that is a warning: speculators' converter writes
    ``eagle_aux_hidden_state_layer_ids: null`` unless the ids are passed to it, so the layers the
    drafter was trained on are often lost rather than the default.
    """
    if pair.intended.source != "default":
        return
    if pair.drafter.layout == "speculators":
        example = ",".join(str(k) for k in pair.captured.layers)
        yield Finding("aux-unset", "warning", aux_field(pair.engine),
                      f"this speculators-layout drafter sets no aux layer ids, so {_name(pair.engine)} captures "
                      f"its default outputs of layers {pair.captured.layers}; speculators' converter "
                      "(speculators convert --algorithm eagle3) writes eagle_aux_hidden_state_layer_ids null "
                      "unless the ids are given in --algorithm-kwargs, so a drafter trained on other layers "
                      "silently gets the wrong features",
                      "if it was trained on other layers, write them into both engines' fields with "
                      "check --fix OUT --aux-layers a,b,c (the 0-based target layers whose outputs it was "
                      f"trained on; the default here is {example})")
    else:
        yield Finding("aux-default", "info", aux_field(pair.engine),
                      f"no aux layer ids are set, so both engines capture the default outputs of layers "
                      f"{pair.captured.layers} (EAGLE's inputs of layers 2, L//2, L-3)",
                      "nothing to do if the drafter was trained on the defaults; otherwise set the ids it was "
                      "trained on")


def looks_shifted(pair: Pair) -> Iterator[Finding]:
    """Ids equal to EAGLE's default written in the other engine's convention are often an off-by-one."""
    captured, num_layers = pair.captured, pair.target.num_layers
    default = default_aux_layers(num_layers)
    if captured.source == "default" or captured.layers != pair.intended.layers or captured.layers == default:
        return
    for other in ENGINES:
        if other != pair.engine and captured.raw_ids == written_aux_ids(other, default, target=pair.target):
            yield Finding("aux-shifted", "warning", aux_field(pair.engine),
                          f"{aux_field(pair.engine)} = {captured.raw_ids} is EAGLE's default written in "
                          f"{_name(other)}'s convention, so {_name(pair.engine)} captures layers {captured.layers}, "
                          f"one later than the default {default}",
                          "keep them if the drafter was trained this way (SpecForge reads them as SGLang does, "
                          "e.g. AQ-MedAI's Kimi-K2 drafter); otherwise set "
                          f"{written_aux_ids(pair.engine, default, target=pair.target, version=pair.release.version)}")


RULES = (out_of_range, duplicates, convention, runner_dependent, other_engine, default_used, looks_shifted)
