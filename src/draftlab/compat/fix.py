"""``check --fix``: write a corrected copy of a drafter, never touching the original.

Every fixable finding has a fixer below that edits a copy of the config or adds a tensor
rename or drop; tensors are written bit for bit (see :mod:`draftlab.checkpoint.write`).
"""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftlab.checkpoint.layouts import flatten_speculators, layer_kind_of
from draftlab.checkpoint.variants import FLAGS, boolean_flags
from draftlab.checkpoint.write import copy_other_files, write_weights
from draftlab.compat.check import check_pair, open_pair, run_rules
from draftlab.compat.findings import CheckResult, Finding
from draftlab.compat.pair import Pair, layer_dict
from draftlab.engines import ENGINES, capturable, written_aux_ids
from draftlab.engines.flags import fc_inputs, read_flag
from draftlab.engines.loading import bound_name, engine_loading, fixed_architecture, weight_fate
from draftlab.engines.written_config import loadable_config
from draftlab.errors import DraftlabError
from draftlab.fsutil import atomic_dir, refuse_overlap, refuse_special


@dataclass
class FixResult:
    out: Path
    before: CheckResult
    after: CheckResult  # ``check`` run on the written folder
    fixed: list[Finding]  # the fixable findings of ``before``
    renamed: dict[str, str] = field(default_factory=dict)  # tensor renames
    config_diff: str = ""  # unified diff of config.json
    written: bool = True  # False: nothing was fixable, so no folder was written (``after`` is ``before``)


@dataclass
class _Edit:
    pair: Pair
    config: dict[str, Any]
    renames: dict[str, str]
    aux_layers: list[int] | None = None  # given by the user; else the layers the config says it was trained on
    drops: set[str] = field(default_factory=set)  # tensors left out of the copy


def _architecture(e: _Edit) -> None:
    """The engine's class for this drafter (an MLA drafter keeps an MLA class), flattened where needed."""
    pair = e.pair
    architecture = fixed_architecture(pair.engine, pair.drafter, pair.release.version)
    assert architecture is not None  # architecture-unknown is fixable only when the release has the class
    if pair.drafter.layout not in engine_loading(pair.engine).config_layouts or pair.drafter.variant.mla:
        if "transformer_layer_config" in e.config:
            e.config = flatten_speculators(e.config, architecture)
    e.config["architectures"] = [architecture]


def _aux_ids(e: _Edit) -> None:
    """Write the trained layers into the field of every engine that can read this layout (the checked
    release's convention for its engine, the newest release's for the other)."""
    layout = "speculators" if "transformer_layer_config" in e.config else "specforge"
    layers = e.aux_layers if e.aux_layers is not None else e.pair.intended.layers
    for engine in ENGINES:
        if layout not in engine_loading(engine).config_layouts:
            continue
        version = e.pair.release.version if engine == e.pair.engine else None
        ids = written_aux_ids(engine, layers, target=e.pair.target, version=version)
        if engine == "sglang":
            eagle = e.config.get("eagle_config") if isinstance(e.config.get("eagle_config"), dict) else {}
            e.config["eagle_config"] = {**eagle, "eagle_aux_hidden_state_layer_ids": ids}
        else:
            e.config["eagle_aux_hidden_state_layer_ids"] = ids


def _variant_places(e: _Edit) -> None:
    """A flag the release reads elsewhere than it is written: written true at every place it reads."""
    pair = e.pair
    for flag in FLAGS:
        reading = read_flag(pair.release, pair.drafter_ckpt.config, pair.drafter, flag.name)
        if not (reading.dropped and reading.places):
            continue
        for place in reading.places:
            *parents, key = place.split(".")
            node = e.config
            for parent in parents:
                node = node.setdefault(parent, {})
            node[key] = True


def _num_aux(e: _Edit) -> None:
    fc = e.pair.tensor("fc.weight")
    assert fc is not None and fc_inputs(e.pair.release, e.config, e.pair.drafter) is not None
    e.config["num_aux_hidden_states"] = fc.shape[1] // e.pair.target.hidden_size


def _context(e: _Edit) -> None:
    layer_dict(e.config)["max_position_embeddings"] = e.pair.target.max_position_embeddings


def _rope(e: _Edit) -> None:
    layer, rope = layer_dict(e.config), e.pair.target.rope
    if isinstance(layer.get("rope_parameters"), dict):
        layer["rope_parameters"] = {"rope_theta": rope.theta, **(rope.scaling or {"rope_type": "default"})}
    else:
        layer["rope_theta"] = rope.theta
        layer["rope_scaling"] = copy.deepcopy(rope.scaling)


def _target_hidden(e: _Edit) -> None:
    e.config["target_hidden_size"] = e.pair.target.hidden_size


def _token_ids(e: _Edit) -> None:
    layer = layer_dict(e.config)
    for key in ("bos_token_id", "eos_token_id"):
        where = layer if key in layer else e.config
        if where.get(key) is not None:
            where[key] = copy.deepcopy(getattr(e.pair.target, key))


def _weight_names(e: _Edit) -> None:
    for name in e.pair.drafter_ckpt.tensors:
        if weight_fate(e.pair.engine, name, e.pair.drafter) == "unused":
            target = bound_name(e.pair.engine, name)
            if target is not None:
                e.renames[name] = target


def _drop_vocab_map(e: _Edit) -> None:
    """A full-vocabulary drafter's d2t/t2d (the identity map, which vLLM 0.30+ refuses to load)."""
    e.drops.update(info.name for info in (e.pair.tensor("d2t"), e.pair.tensor("t2d")) if info is not None)


def _booleans(e: _Edit) -> None:
    """Flags written as strings or numbers: the boolean the engines read from them (both mean the same)."""
    e.config = boolean_flags(e.config)


def _layer_kind(e: _Edit) -> None:
    """The decoder layer the weights are (speculators' transformer_layer_config.model_type)."""
    layer_dict(e.config)["model_type"] = layer_kind_of(e.pair.drafter_ckpt.tensors)


# Order matters: the layout is converted before fields are written into it.
FIXERS: dict[str, Callable[[_Edit], None]] = {
    "flag-not-boolean": _booleans,
    "layer-kind": _layer_kind,
    "architecture-unknown": _architecture,
    "target-hidden-size": _target_hidden,
    "aux-convention": _aux_ids,
    "aux-other-engine": _aux_ids,
    "aux-runner": _aux_ids,
    "variant-misplaced": _variant_places,
    "fc-aux-count": _num_aux,
    "context-too-short": _context,
    "rope-theta": _rope,
    "rope-scaling": _rope,
    "token-ids": _token_ids,
    "weight-names": _weight_names,
    "d2t-full-vocab": _drop_vocab_map,
    # "config-null" needs no fixer: loadable_config, run on every written config, removes the nulls
}


def fix_pair(drafter: str | Path, target: str | Path, out: str | Path, engine: str = "sglang", *,
             aux_layers: list[int] | None = None, engine_version: str | None = None) -> FixResult:
    """Write ``out``: ``drafter`` with every fixable finding for ``target`` in ``engine`` (at
    ``engine_version``, default the newest release) fixed.

    ``aux_layers`` (canonical: 0-based target layers whose outputs the drafter was trained on) are
    written into every engine's field, replacing what the config says; for a drafter whose ids were
    lost (speculators' converter writes null) when the user knows what it was trained on.
    """
    pair = open_pair(drafter, target, engine, engine_version)
    if aux_layers is not None:
        check_aux_layers(pair, aux_layers)
    before = run_rules(pair, Path(drafter), Path(target))
    out = Path(out)
    refuse_overlap(out, {"the drafter's folder": pair.drafter_ckpt.path, "the target's folder": pair.target_ckpt.path},
                   folder=True)
    refuse_special(out, folder=True)
    if out.exists() or out.is_symlink():
        raise DraftlabError("already exists; choose a new output path", path=out)
    fixed = before.fixable
    if not fixed and aux_layers is None:
        return FixResult(out, before, before, [], written=False)
    edit = _Edit(pair, copy.deepcopy(pair.drafter_ckpt.config), {}, aux_layers)
    for code, fixer in FIXERS.items():
        if any(f.code == code for f in fixed):
            fixer(edit)
    if aux_layers is not None:
        _aux_ids(edit)
    edit.config = loadable_config(edit.config, target_hidden_size=_fc_target_hidden(pair),
                                  source_layout=pair.drafter.layout)
    with atomic_dir(out) as tmp:
        (tmp / "config.json").write_text(json.dumps(edit.config, indent=2) + "\n")
        write_weights(pair.drafter_ckpt, tmp, edit.renames, frozenset(edit.drops))
        copy_other_files(pair.drafter_ckpt, tmp)
    return FixResult(out, before, check_pair(out, target, engine, pair.release.version), fixed, edit.renames,
                     config_diff(pair.drafter_ckpt.config, edit.config))


def check_aux_layers(pair: Pair, layers: list[int]) -> None:
    """Refuse ``--aux-layers`` the target cannot provide or the drafter's fc cannot take."""
    ok = capturable(pair.target.num_layers, pair.engine, target=pair.target, version=pair.release.version)
    bad = [k for k in layers if k not in ok]
    if bad:
        raise DraftlabError(f"--aux-layers {bad} are outside 0..{ok.stop - 1}: only the outputs of layers "
                            f"0..{ok.stop - 1} of this {pair.target.num_layers}-layer target can be captured by "
                            f"{pair.release.name}")
    if len(set(layers)) != len(layers):
        raise DraftlabError(f"--aux-layers {layers} name a layer twice; give each layer once")
    fc = pair.tensor("fc.weight")
    if fc is not None and len(fc.shape) == 2 and fc.shape[1] != len(layers) * pair.target.hidden_size:
        raise DraftlabError(f"--aux-layers names {len(layers)} layers but fc.weight takes {fc.shape[1]} inputs "
                            f"({fc.shape[1] // pair.target.hidden_size} x the target's hidden size "
                            f"{pair.target.hidden_size}); give that many layers")
    if layers != sorted(layers):
        raise DraftlabError(f"--aux-layers {layers} must be in ascending order (features are concatenated low "
                            "to high)")


def _fc_target_hidden(pair: Pair) -> int | None:
    """The target's hidden size when the drafter's fc takes exactly its aux features, else None."""
    fc = pair.tensor("fc.weight")
    fits = fc is not None and len(fc.shape) == 2 and fc.shape[1] == len(pair.captured.layers) * pair.target.hidden_size
    return pair.target.hidden_size if fits else None


def config_diff(old: dict[str, Any], new: dict[str, Any], label: str = "config.json (fixed)") -> str:
    """A unified diff of two configs as pretty JSON; ``label`` names the new one."""
    a = json.dumps(old, indent=2).splitlines(keepends=True)
    b = json.dumps(new, indent=2).splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, "config.json", label))
