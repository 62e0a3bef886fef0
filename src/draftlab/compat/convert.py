"""``draftlab convert``: a drafter rewritten in the other layout, SpecForge (SGLang) <-> speculators (vLLM).

Tensors are renamed (``midlayer.*`` <-> ``layers.0.*``) and written bit for bit, ``.bin`` weights as
safetensors holding the same bytes; the config is translated field by field: the decoder layer nested
under ``transformer_layer_config`` or flattened, the verifier named in ``speculators_config``, aux ids
written in the convention of the engine that reads each field, ``rope_scaling`` and
``max_position_embeddings`` kept as they are, the variant flags (:data:`~draftlab.checkpoint.variants.FLAGS`:
the engines read each in one meaning in both layouts) at the speculators top level and their tensors
(``input_norm``, ``fc_norm.{i}``) unchanged. An MLA drafter is refused for the
speculators layout (no engine reads one from it). Every change that is more than a move is listed in
:attr:`ConvertResult.config_changes`. The output is written atomically to a new folder; the input is
never touched.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftlab.checkpoint import (
    Checkpoint,
    DrafterConfig,
    TargetConfig,
    drafter_config,
    is_drafter,
    open_checkpoint,
    target_config,
)
from draftlab.checkpoint.layouts import flatten_speculators, layer_kind_of, layer_renames, nest_speculators
from draftlab.checkpoint.variants import FLAGS, unsupported
from draftlab.checkpoint.write import copy_other_files, write_as_safetensors
from draftlab.compat.check import check_pair
from draftlab.compat.findings import CheckResult
from draftlab.compat.fix import config_diff
from draftlab.compat.pair import layer_dict
from draftlab.engines import NATIVE_ENGINE, configured_aux_layers, written_aux_ids
from draftlab.engines.loading import engine_loading
from draftlab.engines.releases import MLA_CLASS
from draftlab.engines.written_config import loadable_config
from draftlab.errors import DraftlabError
from draftlab.fsutil import atomic_dir, refuse_overlap
from draftlab.readable import present

LAYOUTS = ("specforge", "speculators")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass
class ConfigChange:
    field: str  # dotted, in the written config
    before: Any  # the input's value (None when absent)
    after: Any  # the written value (None when dropped)
    why: str


@dataclass
class ConvertResult:
    out: Path
    from_layout: str  # "specforge" or "speculators"
    to_layout: str
    weights_from: str  # the input's weight format: "safetensors" or "pytorch" (.bin, written as safetensors)
    tensors: int  # tensors written, bytes unchanged
    renamed: dict[str, str] = field(default_factory=dict)
    config_changes: list[ConfigChange] = field(default_factory=list)
    config_diff: str = ""
    engine: str = ""  # the engine the written layout is for: sglang (specforge), vllm (speculators)
    check: CheckResult | None = None  # ``check`` of the written folder against --target in that engine
    hub_target: str | None = None  # --target given as a hub id: named as the verifier, the folder not checked


def convert_drafter(drafter: str | Path, to: str, out: str | Path, *,
                    target: str | Path | None = None) -> ConvertResult:
    """Write ``out``: ``drafter`` in the ``to`` layout ("specforge" or "speculators").

    ``target`` (a target folder) names the verifier in a speculators config and is what the written
    folder is checked against; without it a SpecForge drafter's verifier is unknown (written null).
    """
    if to not in LAYOUTS:
        raise DraftlabError(f"unknown --to {to!r}; choose one of {', '.join(LAYOUTS)}")
    ckpt = open_checkpoint(drafter)
    if not is_drafter(ckpt):
        raise DraftlabError("is not an EAGLE-3 drafter (no Eagle3 architecture, speculators config or fc + "
                            "midlayer weights)", path=drafter)
    d = drafter_config(ckpt)
    _refuse_unconvertible(ckpt)
    hub_id = target is not None and is_hub_id(target)
    if hub_id and to != "speculators":
        raise DraftlabError(f"--target {target} is not a local folder; --to {to} reads --target only to check the "
                            "written folder, so give the target's folder (or drop --target)")
    target_ckpt = open_checkpoint(target) if target is not None and not hub_id else None
    if target_ckpt is not None and is_drafter(target_ckpt):
        raise DraftlabError("is an EAGLE-3 drafter; --target must be the target model", path=target)
    out = Path(out)
    refuse_overlap(out, {"the drafter's folder": ckpt.path,
                         "the target's folder": target_ckpt.path if target_ckpt is not None else None}, folder=True)
    if out.exists():
        raise DraftlabError("already exists; choose a new output path", path=out)

    changes: list[ConfigChange] = []
    family = target_config(target_ckpt) if target_ckpt is not None else None  # whose aux-id rules apply
    if to == "specforge":
        config = _to_specforge(ckpt, d, changes, family)
    else:
        config = _to_speculators(ckpt, d, _verifier(target, target_ckpt), changes, _verifier_why(hub_id), family)
    renames = layer_renames(ckpt.tensors, to)
    with atomic_dir(out) as tmp:
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        write_as_safetensors(ckpt, tmp, renames)
        copy_other_files(ckpt, tmp)
    engine = NATIVE_ENGINE[to]
    check = check_pair(out, target, engine) if target_ckpt is not None else None
    return ConvertResult(out, d.layout, to, ckpt.format, len(ckpt.tensors), renames, changes,
                         config_diff(ckpt.config, config, "config.json (converted)"), engine, check,
                         str(target) if hub_id else None)


# What convert refuses to write: a drafter no engine serves as trained in either layout, which a converted copy
# would only carry further (a flag without its norm weights runs the norms as initialised; no engine serves an MoE
# FFN; parallel drafting has no spelling that survives both layouts).
REFUSED_KINDS = ("flag-without-tensors", "moe", "parallel-drafting")


def _refuse_unconvertible(ckpt: Checkpoint) -> None:
    found = next((u for u in unsupported(ckpt.config, ckpt.tensors) if u.kind in REFUSED_KINDS), None)
    if found is not None:
        raise DraftlabError(f"cannot be converted: {found.message}; no engine serves it as trained in either layout, "
                            "so convert writes nothing (draftlab check names every problem)", path=ckpt.config_path)


def _note(changes: list[ConfigChange], name: str, before: Any, after: Any, why: str) -> None:
    if before != after:
        changes.append(ConfigChange(name, copy.deepcopy(before), copy.deepcopy(after), why))


def _fc_target_hidden(ckpt: Checkpoint, d: DrafterConfig, num_aux: int) -> int:
    """The target hidden size fc was trained on: its input width over the aux layers it takes."""
    fc = ckpt.tensors.get("fc.weight") or ckpt.tensors.get("model.fc.weight")
    if fc is not None and len(fc.shape) == 2 and fc.shape[1] % num_aux == 0:
        return fc.shape[1] // num_aux
    return d.target_hidden_size


def _aux(d: DrafterConfig, family: TargetConfig | None) -> list[int] | None:
    """The canonical layers the drafter names, read by the rules of ``family``'s target (None: Llama's)."""
    found = configured_aux_layers(d, target=family)
    return found.layers if found is not None else None


def _to_specforge(ckpt: Checkpoint, d: DrafterConfig, changes: list[ConfigChange],
                  family: TargetConfig | None) -> dict[str, Any]:
    """The flat config SGLang and SpecForge read, with both engines' aux fields written."""
    config = ckpt.config
    architecture = MLA_CLASS if d.variant.mla is not None else engine_loading("sglang").architecture
    if d.layout == "speculators":
        flat = flatten_speculators(config, architecture)
        verifier = (config.get("speculators_config") or {}).get("verifier")
        _note(changes, "transformer_layer_config", "nested", "flattened",
              "SGLang and SpecForge read one flat config; speculators_config (verifier "
              f"{verifier.get('name_or_path') if isinstance(verifier, dict) else None}) has no SpecForge field")
        if config.get("norm_output") is False:
            _note(changes, "norm_output", False, None,
                  "false is the engines' default; left out because SpecForge v0.3 reads a false norm_output as "
                  "'skip the final norm'")
    else:
        flat = copy.deepcopy(config)
    _note(changes, "architectures", config.get("architectures"), [architecture], "the class SGLang loads")
    flat["architectures"] = [architecture]
    aux = _aux(d, family)
    if aux is not None:
        sglang = written_aux_ids("sglang", aux, target=family)
        eagle = flat.get("eagle_config") if isinstance(flat.get("eagle_config"), dict) else {}
        flat["eagle_config"] = {**eagle, "eagle_aux_hidden_state_layer_ids": sglang}
        flat["eagle_aux_hidden_state_layer_ids"] = written_aux_ids("vllm", aux)
        before = ((config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
                  if isinstance(config.get("eagle_config"), dict) else None)
        _note(changes, "eagle_config.eagle_aux_hidden_state_layer_ids", before, sglang,
              f"SGLang captures the outputs of layers {aux} from these")
        _note(changes, "eagle_aux_hidden_state_layer_ids", config.get("eagle_aux_hidden_state_layer_ids"),
              written_aux_ids("vllm", aux), f"vLLM reads these as inputs of layers {written_aux_ids('vllm', aux)} "
              f"(canonical + 1): the outputs of layers {aux}")
    elif "eagle_aux_hidden_state_layer_ids" in flat and flat["eagle_aux_hidden_state_layer_ids"] is None:
        del flat["eagle_aux_hidden_state_layer_ids"]  # speculators writes null for "the default"
    if d.layout == "speculators" and (d.norm_before_residual or "norm_before_residual" in config):
        _note(changes, "norm_before_residual", config.get("norm_before_residual"), d.norm_before_residual,
              "written out: vLLM reads a missing value as true in a speculators config, false in a flat one")
        flat["norm_before_residual"] = d.norm_before_residual
    hidden = _fc_target_hidden(ckpt, d, len(aux) if aux else 3)
    written = loadable_config(flat, target_hidden_size=hidden, source_layout=d.layout)
    _note(changes, "target_hidden_size", config.get("target_hidden_size"), written.get("target_hidden_size"),
          "SGLang, vLLM and SpecForge size fc from it whenever the key exists (null fails); set only when "
          "the target's hidden size differs from the drafter's")
    return written


def is_hub_id(target: str | Path) -> bool:
    """True for ``org/name`` (a Hugging Face hub id) that names nothing on this machine."""
    text = str(target)
    return not present(text) and _HUB_ID.fullmatch(text) is not None


def _verifier(target: str | Path | None, target_ckpt: Checkpoint | None) -> dict[str, Any] | None:
    """speculators' VerifierConfig fields for ``--target``: where ``from_pretrained`` finds it from any
    directory (a local folder as an absolute path, a hub id as given) and its architectures."""
    if target is None:
        return None
    if target_ckpt is None:
        return {"name_or_path": str(target), "architectures": []}
    architectures = target_ckpt.config.get("architectures")
    if not isinstance(architectures, list):
        architectures = []
    return {"name_or_path": str(Path(target).absolute()), "architectures": architectures}


def _verifier_why(hub_id: bool) -> str:
    """What the verifier's ``name_or_path`` is, for the printed list of config changes."""
    if hub_id:
        return "from --target, a hub id (not a local folder, so the written folder is not checked)"
    return "from --target, as an absolute path (speculators resolves a relative one from where it runs)"


def _to_speculators(ckpt: Checkpoint, d: DrafterConfig, verifier: dict[str, Any] | None,
                    changes: list[ConfigChange], why: str, family: TargetConfig | None) -> dict[str, Any]:
    """The speculators config vLLM and speculators read; a speculators config gets only its verifier set."""
    config = ckpt.config
    if d.variant.mla is not None:
        raise DraftlabError("is an MLA drafter; no engine reads an MLA drafter from the speculators layout (vLLM "
                            "builds a Llama drafter from it), so it stays in the SpecForge layout",
                            path=ckpt.config_path)
    if d.layout == "speculators":
        out = copy.deepcopy(config)
        if verifier is not None:
            spec = out.setdefault("speculators_config", {})
            _note(changes, "speculators_config.verifier", spec.get("verifier"), verifier, why)
            spec["verifier"] = verifier
        return out
    if verifier is None:
        verifier = {"name_or_path": None, "architectures": []}
        _note(changes, "speculators_config.verifier", None, verifier,
              "a SpecForge config names no verifier; pass --target TARGET to name it (vllm serve DRAFTER loads it)")
    else:
        _note(changes, "speculators_config.verifier", None, verifier, why)
    aux = _aux(d, family)
    hidden = _fc_target_hidden(ckpt, d, len(aux) if aux else 3)
    top: dict[str, Any] = {
        "draft_vocab_size": d.draft_vocab_size,
        "target_hidden_size": hidden if hidden != d.hidden_size else None,
        "norm_before_residual": d.norm_before_residual,
        "eagle_aux_hidden_state_layer_ids": written_aux_ids("vllm", aux) if aux is not None else None,
    }
    top.update({k: config[k] for k in (*(f.name for f in FLAGS), "embed_requires_grad") if k in config})
    for flag in FLAGS:
        if getattr(d.variant, flag.name) and config.get(flag.name) is not True:  # set in eagle_config, or legacy
            top[flag.name] = True
            _note(changes, flag.name, config.get(flag.name), True, "speculators and vLLM read it at the top level "
                                                                   "only")
    _note(changes, "draft_vocab_size", config.get("draft_vocab_size"), d.draft_vocab_size,
          "speculators reads a missing draft_vocab_size as 32000; written out")
    _note(changes, "norm_before_residual", config.get("norm_before_residual"), d.norm_before_residual,
          "written out: vLLM reads a missing value as true in a speculators config")
    if aux is not None:
        _note(changes, "eagle_aux_hidden_state_layer_ids", config.get("eagle_aux_hidden_state_layer_ids"),
              top["eagle_aux_hidden_state_layer_ids"], f"vLLM and speculators read these as inputs of layers "
              f"(canonical + 1): the outputs of layers {aux}")
    if isinstance(config.get("eagle_config"), dict):
        if config["eagle_config"].get("use_aux_hidden_state") is False:
            raise DraftlabError("sets eagle_config.use_aux_hidden_state false (a drafter without fc over aux "
                                "features); the speculators layout has no such drafter, so it cannot be converted",
                                path=ckpt.config_path)
        _note(changes, "eagle_config", config["eagle_config"], None,
              "SGLang's field; a speculators config carries the ids at the top level only")
    _note(changes, "architectures", config.get("architectures"), ["Eagle3Speculator"],
          "speculators' class (vLLM picks its EAGLE-3 model from speculators_model_type)")
    kind = layer_kind_of(ckpt.tensors)
    _note(changes, "transformer_layer_config.model_type", layer_dict(config).get("model_type"), kind,
          "speculators and vLLM build the decoder layer from it (vLLM >= 0.24: qwen3 -> Eagle3Qwen3ForCausalLM, "
          "llama -> its Llama drafter, anything else refused); the weights are a "
          + ("Qwen3 layer (q_norm/k_norm)" if kind == "qwen3" else "Llama layer"))
    return nest_speculators({**config, "model_type": kind}, verifier=verifier, top=top)
