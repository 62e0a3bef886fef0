"""Which SGLang and vLLM releases serve a target's own MTP layers as its drafter, and with which flags.

How each engine COMPUTES the head (what it feeds back, which embedding and head) is
:mod:`draftlab.engines.mtp_head`'s; this module holds what a release SERVES: for which target
architectures it builds an MTP draft model, what it reads the layer count from, what it does with more
than one layer, trees or chains, and the command-line flags that turn it on.

Facts, read in the engines' code (SGLang: ``python/sglang/srt``; vLLM: ``vllm/``), the same in every
release ``engines/releases.py`` knows (SGLang 0.5.10-0.5.23, vLLM 0.17.1-0.34.0; every class below
predates the oldest of them):

- SGLang: ``--speculative-algorithm NEXTN`` is rewritten to ``EAGLE`` (``server_args.py``
  ``_handle_speculative_decoding``); the draft worker loads ``--speculative-draft-model-path`` as a
  draft model, and ``configs/model_config.py`` (``is_draft_model``) swaps the target's architecture for
  its MTP class: ``DeepseekV3ForCausalLM``/``DeepseekV32ForCausalLM`` -> ``DeepseekV3ForCausalLMNextN``
  (``models/deepseek_nextn.py``), ``Glm4MoeForCausalLM`` -> ``Glm4MoeForCausalLMNextN``
  (``glm4_moe_nextn.py``), ``Glm4MoeLiteForCausalLM`` -> ``Glm4MoeLiteForCausalLMNextN``
  (``glm4_moe_lite_nextn.py``), ``GlmMoeDsaForCausalLM`` -> ``GlmMoeDsaForCausalLMNextN`` (``glm4_moe.py``, a
  ``DeepseekV3ForCausalLMNextN``), ``MiMoForCausalLM`` -> ``MiMoMTP`` (``mimo_mtp.py``),
  ``Qwen3NextForCausalLM`` -> ``Qwen3NextForCausalLMMTP`` (``qwen3_next_mtp.py``, which sets
  ``num_nextn_predict_layers = 1``), the Qwen3.5/3.6 classes -> ``Qwen3_5ForCausalLMMTP``
  (``qwen3_5_mtp.py``). For DeepSeek-V3/V3.2 and GLM-4.5+/4.7-Flash targets ``server_args.py`` sets the
  draft path to the target's own when it is not given; for the others it must be given (the target's
  folder). The DeepSeek NextN weight loader these classes load with asserts ``num_nextn_predict_layers == 1``
  ("Only 1 nextn layer is supported": ``deepseek_nextn.py``, ``deepseek_v2.py`` with ``is_nextn``). Every draft step runs that
  one layer again; trees (``--speculative-eagle-topk`` > 1) are the EAGLE worker's, as for EAGLE-3.
- vLLM: ``--speculative-config '{"method": "mtp", "num_speculative_tokens": K}'`` with no ``model``
  drafts with the target's own checkpoint (``config/speculative.py`` ``__post_init__``); the per-model
  names (``deepseek_mtp``, ``qwen3_next_mtp``, ``mimo_mtp``, ``glm4_moe_mtp``, ``qwen3_5_mtp``, ...:
  ``MTPModelTypes``) are deprecated aliases it rewrites to ``mtp`` with a warning.
  ``hf_config_override`` maps the target to its MTP model: model_type ``deepseek_v3``, ``deepseek_v32``,
  ``glm_moe_dsa`` -> ``deepseek_mtp`` (``models/deepseek_mtp.py``); architecture ``Glm4MoeForCausalLM`` ->
  ``glm4_moe_mtp``, ``Glm4MoeLiteForCausalLM`` -> ``glm4_moe_lite_mtp``, ``MiMoForCausalLM`` ->
  ``mimo_mtp``; model_type ``qwen3_next`` -> ``qwen3_next_mtp``; ``qwen3_5``/``qwen3_5_moe`` (and their
  ``_text`` forms) -> ``qwen3_5_mtp``, whose ``n_predict`` is ``mtp_num_hidden_layers`` (the others':
  ``num_nextn_predict_layers``). ``num_speculative_tokens`` above ``n_predict`` must be a multiple of it
  ("Ensure divisibility for MTP module reuse"); above 1 it warns that the same MTP layer runs several
  times. A chain only: the MTP proposer drafts ``num_speculative_tokens`` one after another (its
  ``speculative_token_tree`` is EAGLE's).

Read in two snapshots of vLLM's ``config/speculative.py`` (an early-2026 one, commit f19b16d, and one after
0.34.0, commit 002e77c) whose release boundaries could not be dated, so draftlab does not apply them per
release: the older maps only ``qwen3_5``/``qwen3_5_moe`` (a text-only Qwen3.5 config, ``qwen3_5_text``, is
mapped by the newer), and forces ``enforce_eager`` for DeepSeek-V3.2 MTP ("cudgraph with v32 MTP is not
supported"); the newer builds ``DeepseekV32MTPModel`` for V3.2 and GLM-5 (the older ``DeepSeekMTPModel``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draftlab.checkpoint.configs import text_config
from draftlab.checkpoint.reader import open_checkpoint
from draftlab.engines.releases import NAMES, release
from draftlab.errors import DraftlabError

MTP = "mtp"  # the --drafter spelling for the target's own MTP head (models/mtp.py's MTP)


@dataclass(frozen=True)
class MtpFamily:
    """One family of targets with MTP layers, and the class each engine serves them with."""

    name: str  # for messages
    architectures: tuple[str, ...]  # the target's architectures[0]
    model_types: tuple[str, ...]  # the (top-level) model_type, which vLLM keys most families on
    sglang_class: str  # configs/model_config.py: the draft architecture it swaps in
    sglang_file: str
    vllm_model_type: str  # config/speculative.py hf_config_override: the MTP model_type it maps to
    vllm_file: str
    count_key: str  # the config key holding the number of MTP layers
    sglang_draft_path_automatic: bool  # server_args.py sets --speculative-draft-model-path to the target


FAMILIES = (
    MtpFamily("DeepSeek-V3/V3.2", ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"), ("deepseek_v3", "deepseek_v32"),
              "DeepseekV3ForCausalLMNextN", "models/deepseek_nextn.py", "deepseek_mtp", "models/deepseek_mtp.py",
              "num_nextn_predict_layers", True),
    MtpFamily("GLM-5", ("GlmMoeDsaForCausalLM",), ("glm_moe_dsa",), "GlmMoeDsaForCausalLMNextN",
              "models/glm4_moe.py", "deepseek_mtp", "models/deepseek_mtp.py", "num_nextn_predict_layers", False),
    MtpFamily("GLM-4.5+", ("Glm4MoeForCausalLM",), ("glm4_moe",), "Glm4MoeForCausalLMNextN", "models/glm4_moe_nextn.py",
              "glm4_moe_mtp", "models/glm4_moe_mtp.py", "num_nextn_predict_layers", True),
    MtpFamily("GLM-4.7-Flash", ("Glm4MoeLiteForCausalLM",), ("glm4_moe_lite",), "Glm4MoeLiteForCausalLMNextN",
              "models/glm4_moe_lite_nextn.py", "glm4_moe_lite_mtp", "models/glm4_moe_lite_mtp.py",
              "num_nextn_predict_layers", True),
    MtpFamily("MiMo", ("MiMoForCausalLM",), ("mimo",), "MiMoMTP", "models/mimo_mtp.py", "mimo_mtp",
              "models/mimo_mtp.py", "num_nextn_predict_layers", False),
    MtpFamily("Qwen3-Next", ("Qwen3NextForCausalLM",), ("qwen3_next",), "Qwen3NextForCausalLMMTP",
              "models/qwen3_next_mtp.py", "qwen3_next_mtp", "models/qwen3_next_mtp.py", "num_nextn_predict_layers",
              False),
    MtpFamily("Qwen3.5/3.6", ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
                              "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"),
              ("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"), "Qwen3_5ForCausalLMMTP",
              "models/qwen3_5_mtp.py", "qwen3_5_mtp", "models/qwen3_5_mtp.py", "mtp_num_hidden_layers", False),
)
_LAYOUTS = ("deepseek", "qwen3_next", "mimo")  # model.layers.{L}.eh_proj / mtp.fc / model.mtp_layers.{i}.


@dataclass(frozen=True)
class ShippedMtp:
    """The MTP layers a target checkpoint ships, from its config and tensor names alone."""

    layout: str  # one of _LAYOUTS
    prefix: str  # the first MTP layer's tensor prefix ("model.layers.61.", "mtp.", "model.mtp_layers.0.")
    declared: int  # the layer count the config declares (0: none)
    count_key: str | None  # the config key it comes from (None: the config declares none)
    stored: int  # MTP layers whose tensors are stored
    num_tensors: int
    num_parameters: int

    def describe(self) -> dict[str, Any]:
        return {"layout": self.layout, "prefix": self.prefix, "num_layers": self.declared,
                "count_key": self.count_key, "stored_layers": self.stored, "num_tensors": self.num_tensors,
                "num_parameters": self.num_parameters}


def family_of(config: Mapping[str, Any]) -> MtpFamily | None:
    """The MTP family of a target config (by its first architecture, else its model_type)."""
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    model_type = config.get("model_type")
    return (next((f for f in FAMILIES if arch in f.architectures), None)
            or next((f for f in FAMILIES if model_type in f.model_types), None))


def count_of(config: Mapping[str, Any], key: str) -> int:
    """The positive int ``key`` of a target config, at the top level or in its text config (0: unset)."""
    for cfg in (config, text_config(dict(config))):
        value = cfg.get(key)
        if type(value) is int and value > 0:
            return value
    return 0


def declared_layers(config: Mapping[str, Any]) -> tuple[int, str | None]:
    """(count, key): the MTP layer count a target config declares under either engine's key."""
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        if count := count_of(config, key):
            return count, key
    return 0, None


def shipped_mtp(config: Mapping[str, Any], numels: Mapping[str, int]) -> ShippedMtp | None:
    """The MTP layers of a target with these tensors (name -> element count); None when it ships none."""
    declared, key = declared_layers(config)
    depth = text_config(dict(config)).get("num_hidden_layers")
    prefixes = {"qwen3_next": "mtp.", "mimo": "model.mtp_layers."}
    if isinstance(depth, int):
        prefixes["deepseek"] = "model.layers."
    for layout in _LAYOUTS:
        if layout not in prefixes:
            continue
        layers = _mtp_layers(layout, prefixes[layout], numels, depth)
        if layers:
            names = [n for n in numels if any(n.startswith(p) for p in layers)]
            return ShippedMtp(layout, min(layers, key=_layer_number), declared, key, len(layers), len(names),
                              sum(numels[n] for n in names))
    return None


def _mtp_layers(layout: str, prefix: str, numels: Mapping[str, int], depth: Any) -> set[str]:
    """The tensor prefixes of the stored MTP layers of one layout (empty: that layout is absent)."""
    if layout == "qwen3_next":
        return {prefix} if f"{prefix}fc.weight" in numels else set()
    if layout == "mimo":
        return {".".join(n.split(".")[:3]) + "." for n in numels if n.startswith(prefix)}
    # DeepSeek/GLM: layers L, L+1, ... after the decoder's, each with its own eh_proj
    return {n.removesuffix("eh_proj.weight") for n in numels
            if n.startswith(prefix) and n.endswith(".eh_proj.weight") and _layer_number(n) >= depth}


def _layer_number(name: str) -> int:
    digits = [part for part in name.split(".") if part.isdigit()]
    return int(digits[0]) if digits else 0


@dataclass(frozen=True)
class MtpSupport:
    """Whether one release serves a target's MTP layers, and how."""

    engine: str
    version: str
    family: MtpFamily | None
    served: bool
    why_not: str | None  # one sentence (None when served)
    draft_class: str | None  # SGLang: the draft architecture; vLLM: the MTP model_type
    source: str  # the engine file the rule comes from
    trees: bool  # topk > 1 (SGLang's EAGLE worker); vLLM drafts a chain
    n_predict: int  # MTP layers the release counts (vLLM: num_speculative_tokens above it must be a multiple)
    eagle3_unserved: str | None = None  # why the release serves no EAGLE-3 drafter on this target (releases.py)

    @property
    def name(self) -> str:
        return f"{NAMES[self.engine]} {self.version}"


def mtp_support(engine: str, version: str | None, config: Mapping[str, Any], shipped: ShippedMtp | None
                ) -> MtpSupport:
    """Whether ``engine`` at ``version`` (None: the newest known) serves the MTP layers of a target with this
    config and these shipped layers (:func:`shipped_mtp`)."""
    rel = release(engine, version)
    family = family_of(config)
    arch = (config.get("architectures") or ["?"])[0]
    server = "server_args.py" if engine == "sglang" else "config/speculative.py"
    if family is None:
        where = "configs/model_config.py" if engine == "sglang" else "config/speculative.py hf_config_override"
        return MtpSupport(engine, rel.version, None, False, f"{rel.name} has no MTP draft model for {arch} ({where})",
                          None, where, False, 0)
    draft, source = ((family.sglang_class, family.sglang_file) if engine == "sglang"
                     else (family.vllm_model_type, family.vllm_file))
    trees = engine == "sglang"
    declared = count_of(config, family.count_key)
    # qwen3_next_mtp.py sets num_nextn_predict_layers = 1 itself; every other class builds the count it reads
    needs_count = not (engine == "sglang" and family.sglang_class == "Qwen3NextForCausalLMMTP")
    why = None
    if shipped is None or shipped.stored == 0:
        why = f"the checkpoint stores no MTP layer for {rel.name}'s {draft} to load"
    elif declared == 0 and needs_count:
        why = f"the config sets no {family.count_key}, so {rel.name}'s {draft} builds no MTP layer ({server})"
    elif engine == "sglang" and shipped.layout == "deepseek" and declared != 1:
        why = (f"{family.count_key} is {declared}: the DeepSeek NextN weight loader {family.sglang_class} loads with "
               "asserts exactly 1 (models/deepseek_nextn.py: num_nextn_predict_layers == 1)")
    n_predict = 1 if engine == "sglang" else max(declared, 1)
    model_type = str(text_config(dict(config)).get("model_type") or config.get("model_type") or "")
    return MtpSupport(engine, rel.version, family, why is None, why, draft, source, trees, n_predict,
                      rel.unserved_because(model_type))


def target_support(target: str | Path, engine: str, version: str | None) -> MtpSupport | None:
    """:func:`mtp_support` for a local target folder, from its headers (None: not a local folder, a hub id)."""
    if not (Path(target) / "config.json").is_file():
        return None
    ckpt = open_checkpoint(target)
    numels = {name: info.numel for name, info in ckpt.tensors.items()}
    return mtp_support(engine, version, ckpt.config, shipped_mtp(ckpt.config, numels))


def sglang_mtp_args(target: str, support: MtpSupport | None) -> tuple[list[str], str]:
    """SGLang's flags for the target's own MTP head, and a note on the draft path."""
    argv = ["--speculative-algorithm", "NEXTN"]  # server_args.py: an alias it rewrites to EAGLE
    family = support.family if support is not None else None
    if family is not None and family.sglang_draft_path_automatic:
        return argv, (f"--speculative-draft-model-path left out: SGLang sets it to the target itself for "
                      f"{family.name} targets (server_args.py)")
    return argv + ["--speculative-draft-model-path", target], (
        "--speculative-draft-model-path is the target itself: SGLang loads its MTP layer from it as the draft "
        f"model ({family.sglang_class if family else 'configs/model_config.py'}); server_args.py fills the path in "
        "for DeepSeek-V3/V3.2 and GLM-4.5+ architectures only")


def vllm_mtp_config(steps: int, support: MtpSupport | None) -> dict[str, Any]:
    """vLLM's --speculative-config for the target's own MTP head (no "model": vLLM uses the target's)."""
    n = support.n_predict if support is not None else 1
    if steps > n and steps % n:  # config/speculative.py: "Ensure divisibility for MTP module reuse"
        raise DraftlabError(f"--steps {steps}: vLLM reuses the target's {n} MTP layers and refuses a "
                            f"num_speculative_tokens above {n} that is not a multiple of it; use --steps "
                            f"{n * (steps // n)} or {n * (steps // n + 1)}")
    return {"method": MTP, "num_speculative_tokens": steps}
