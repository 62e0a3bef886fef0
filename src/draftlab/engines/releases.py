"""What each SGLang and vLLM release reads from an EAGLE-3 drafter: one :class:`Release` per release.

Every fact is from ``../shared/reference/drafter-variants.md`` (read in the released packages' code;
the PR that brought each change is named beside it), sections 1-5 and the table in section 8:

- which drafter classes a release registers (the MLA drafter ``Eagle3DeepseekV2ForCausalLM``:
  SGLang 0.5.12 #24826, vLLM 0.18.0 #36361, with the alias ``Eagle3DeepseekV3ForCausalLM``);
- where it reads each variant flag (``norm_before_fc``, ``fc_norm``, ``norm_output``), per drafter
  class (Llama / MLA) and config layout, as dotted config paths in lookup order;
- how it reads aux-layer ids (SGLang's ``+1`` rules per target family, vLLM's runners);
- how its Llama drafter sizes ``fc`` (vLLM 0.22+: ``num_aux_hidden_states``, else the nested ids).

and from ``../shared/reference/engine-releases-2026-12.md`` (read in the released wheels, December 2026):
vLLM's default runner, the final boundary it captures, the d2t it creates, SGLang's Qwen3.5 targets.
Each rule names the engine file it comes from.

Any version string resolves to the rules of the newest known release at or below it (``0.5.13.post1``
-> 0.5.13, ``0.22.1`` -> 0.22.0: the reference found the patch and post releases byte-identical to their
base in every EAGLE-3 path); one newer than the newest known gets the newest rules and one warning naming
it; one older than the oldest known, or an empty one, is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from packaging.version import InvalidVersion, Version

from draftlab.console import err_console
from draftlab.errors import DraftlabError

# The releases whose rules draftlab knows: every release where one of them changes, and the ones the notes read.
SGLANG_VERSIONS = ("0.5.10", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17",
                   "0.5.19", "0.5.21", "0.5.22", "0.5.23")
VLLM_VERSIONS = ("0.17.1", "0.18.0", "0.19.0", "0.20.0", "0.21.0", "0.22.0", "0.23.0", "0.24.0", "0.25.0", "0.26.0",
                 "0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.33.0", "0.34.0")
VERSIONS = {"sglang": SGLANG_VERSIONS, "vllm": VLLM_VERSIONS}
NAMES = {"sglang": "SGLang", "vllm": "vLLM"}
# TensorRT-LLM: only what a per-batch-size schedule needs (engine-interop.md section 4). These are the
# releases whose API reference documents ``draft_len_schedule`` with inclusive upper-bound keys
# (PR #10860); no wheel could be diffed, so older releases are not known at all.
TRTLLM_VERSIONS = ("1.3.0rc27", "1.3.0rc29", "1.4.0rc1", "1.4.0rc4")
# Per-batch-size draft length (engine-interop.md sections 1, 3b): the first release that takes a
# schedule, and the first whose schedule may switch speculation off (K = 0) for a batch-size range.
SCHEDULE_FIRST = {"vllm": "0.24.0", "sglang": "0.5.13"}  # vLLM PR #32374; SGLang PR #24055 (per-BS slots)
SCHEDULE_ZERO_FIRST = {"vllm": "0.24.0", "sglang": "0.5.14"}  # SGLang: candidate_steps 0 ("nospec")

LLAMA_CLASS = "LlamaForCausalLMEagle3"
MLA_CLASS = "Eagle3DeepseekV2ForCausalLM"
# vLLM's registry: its Llama EAGLE-3 model under every name it maps there.
_VLLM_LLAMA = frozenset({"Eagle3LlamaForCausalLM", LLAMA_CLASS, "Eagle3Qwen2_5vlForCausalLM",
                         "Eagle3Qwen3vlForCausalLM", "Eagle3MiniMaxM2ForCausalLM"})
_VLLM_MLA = frozenset({MLA_CLASS, "Eagle3DeepseekV3ForCausalLM"})

# Target families whose aux capture differs (model_type of the target's text model).
DEEPSEEK_FAMILY = ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25", "glm4_moe_lite")
GPT_OSS_FAMILY = ("gpt_oss",)

# vLLM: target model_types (of the text model) whose final boundary (id L, the last layer's output before the
# final norm) the release captures, by the first release that does. From 0.18.0 the decoders built on
# ``EagleModelMixin`` (model_executor/models/interfaces.py) append the input of layer 0 and the output of
# every layer (``_maybe_add_hidden_state(..., idx + 1, ...)``); 0.17.1 captures only inputs of layers.
VLLM_FINAL_BOUNDARY = (
    # llama.py, qwen2.py (qwen3.py's Qwen3Model is a Qwen2Model), qwen3_moe.py, gpt_oss.py, minicpm.py,
    # qwen3_vl.py, qwen3_vl_moe.py, hunyuan_v1.py
    ("0.18.0", ("llama", "qwen2", "qwen3", "qwen3_moe", "gpt_oss", "minicpm", "qwen3_vl", "qwen3_vl_text",
                "qwen3_vl_moe", "qwen3_vl_moe_text", "hunyuan_v1_dense", "hunyuan_v1_moe")),
    # qwen3_next.py, minimax_m2.py, gemma4.py: read in the 0.20.0 wheel (the reference, which skipped 0.20, says 0.21)
    ("0.20.0", ("qwen3_next", "minimax_m2", "gemma4", "gemma4_text")),
    ("0.22.0", ("nemotron_h",)),  # nemotron_h.py
    # mimo_v2.py; deepseek_v2.py captures end_layer (the "deepseek" family: DeepSeek V2/V3, Kimi K2.x)
    ("0.25.0", ("mimo_v2", "mimo_v2_flash", "deepseek")),
)
# vLLM 0.28 (config/vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES): the MoE targets that default to Model Runner V2.
VLLM_028_MRV2_MOE = frozenset({"DeepseekV2ForCausalLM", "DeepseekV4ForCausalLM", "GraniteMoeForCausalLM",
                               "InklingForCausalLM", "InklingForConditionalGeneration",
                               "KimiK3ForConditionalGeneration", "LongcatFlashNgramForCausalLM",
                               "Qwen2MoeForCausalLM"})
# vLLM 0.28-0.33: what still forces the V1 runner on an EAGLE-3 deployment (config/vllm.py
# ``_get_v2_model_runner_unsupported_features``), as (first, last, condition).
VLLM_V1_FORCED = (
    ("0.28.0", "0.33.0", "P-EAGLE parallel drafting"),
    ("0.28.0", "0.29.0", "EAGLE-3 with pipeline parallelism"),
    ("0.28.0", "0.33.0", "dual batch overlap"),
    ("0.28.0", "0.31.0", "elastic expert parallelism"),
    ("0.28.0", "0.30.0", "custom logits processors"),
)
# SGLang: target model_types (prefixes) it serves no EAGLE-3 for before a release, and why. Qwen3.5/3.6
# (Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration, Qwen3_5ForCausalLM): before 0.5.22 the
# VL wrapper sets layers_to_capture but its decoder reads per-layer flags nothing sets (models/qwen3_5.py).
SGLANG_SERVES_FROM = {
    "qwen3_5": ("0.5.22", "its decoder reads per-layer capture flags nothing sets, so the drafter gets empty "
                          "features and CUDA-graph capture crashes; sglang PR #38307"),
}

Places = tuple[str, ...]  # dotted config paths a flag is read from, in lookup order; () = not read


def version_key(version: str) -> Version:
    """A release's version, ordered as the package index orders them (``0.5.12 < 0.5.12.post1 < 0.5.13``,
    ``0.30.0rc1 < 0.30.0``); a string that is no version is refused in one line."""
    try:
        return Version(version)
    except InvalidVersion:
        raise DraftlabError(f"--engine-version {version!r} is not a version number (e.g. 0.34.0)") from None


@dataclass(frozen=True)
class Release:
    """How one release of one engine reads a drafter."""

    engine: str  # "sglang" | "vllm"
    version: str
    architectures: frozenset[str]  # drafter classes it registers
    mla_architectures: frozenset[str]  # the MLA ones among them (empty: no MLA drafter)
    # (drafter class "llama" | "mla", layout "specforge" | "speculators") -> flag -> places it is read from
    reads: Mapping[tuple[str, str], Mapping[str, Places]]
    mla_fc_norm_applied: bool  # vLLM 0.22.0's MLA drafter loads fc_norm but never applies it (#43482)
    mla_needs_q_lora_rank: bool  # SGLang: "Eagle3 MLA layer requires q_lora_rank"
    target_model_types: tuple[str, ...] | None  # vLLM's EAGLE-3 target allow-list (#31254); None: any
    # SGLang aux capture (section 5): DeepSeek/Kimi/GLM-lite targets take ids verbatim unless the first
    # is 1 (0.5.13+, #25454); gpt-oss takes boundary ids verbatim when max(ids) == L (0.5.17+, #32334)
    deepseek_first_id_rule: bool = False
    gpt_oss_boundary_rule: bool = False
    # vLLM aux capture: the runners that exist (V1 reads nested eagle_config ids 0.22-0.33, MRV2 never)
    runners: tuple[str, ...] = ()
    # targets whose final boundary (id L) the release captures: model_types, or the families of target_family
    final_boundary_families: tuple[str, ...] = ()
    fc_from_num_aux: bool = False  # llama_eagle3 sizes fc from num_aux_hidden_states / nested ids / 3
    # vLLM 0.30+: draft_id_to_target_id exists only when draft_vocab_size differs from the target's vocabulary
    d2t_needs_pruned_vocab: bool = False
    # per-batch-size draft length (SCHEDULE_FIRST) and whether a range may say K = 0 (SCHEDULE_ZERO_FIRST)
    batch_schedule: bool = False
    schedule_zero: bool = False

    @property
    def name(self) -> str:
        return f"{NAMES[self.engine]} {self.version}"

    def at(self, first: str) -> bool:
        """Whether this release is ``first`` or newer."""
        return version_key(self.version) >= version_key(first)

    def places(self, flag: str, drafter_class: str, layout: str) -> Places:
        """Where this release reads ``flag`` for a drafter of that class and layout (() = nowhere)."""
        return self.reads.get((drafter_class, layout), {}).get(flag, ())

    def default_runner(self, moe_target: bool, architecture: str = "?", model_type: str = "") -> str | None:
        """The vLLM runner a target gets without ``VLLM_USE_V2_MODEL_RUNNER`` or a condition that forces V1
        (:meth:`v1_forced_by`); None: not pinned down. From ``VllmConfig.use_v2_model_runner``
        (config/vllm.py) of each release."""
        if len(self.runners) == 1:  # <= 0.21: V1 only; 0.34.0: the V1 runner file is gone
            return self.runners[0]
        if self.at("0.29.0"):  # every target (ROCm keeps DeepSeek-V3.2/V4 and GLM-MoE-DSA on V1)
            return "MRV2"
        if self.at("0.28.0") and moe_target:  # MoE: the listed architectures only
            return "MRV2" if architecture in VLLM_028_MRV2_MOE else "V1"
        if self.at("0.25.0"):  # listed architectures or any non-MoE target
            if not moe_target:
                return "MRV2"
            return "V1" if target_family(model_type) == "deepseek" else None  # DeepSeek-V3/Kimi-K2: unlisted
        return "V1" if moe_target else None  # 0.22-0.24: V2 only for a list of dense, unquantised archs

    def v1_forced_by(self) -> tuple[str, ...]:
        """The deployment settings that put a vLLM 0.28-0.33 EAGLE-3 server on the V1 runner."""
        return tuple(what for first, last, what in VLLM_V1_FORCED
                     if self.at(first) and version_key(self.version) <= version_key(last))

    def captures_final_boundary(self, model_type: str) -> bool:
        """Whether this release can capture a target's final boundary (its last layer's output)."""
        return bool({model_type, target_family(model_type)} & set(self.final_boundary_families))

    def serves_target(self, model_type: str) -> bool:
        """Whether this release serves EAGLE-3 on a target of this (text) model_type at all."""
        return self.unserved_because(model_type) is None

    def unserved_because(self, model_type: str) -> str | None:
        """Why this release serves no EAGLE-3 on a target of this model_type (None: it serves it)."""
        if self.engine != "sglang":
            return None
        return next((why for prefix, (first, why) in SGLANG_SERVES_FROM.items()
                     if model_type.startswith(prefix) and not self.at(first)), None)


def _sglang(version: str) -> Release:
    v = version_key(version)
    at = lambda first: v >= version_key(first)  # noqa: E731
    llama = {
        "norm_before_fc": ("eagle_config.norm_before_fc", "norm_before_fc") if at("0.5.17") else (),  # #32334
        "fc_norm": ("fc_norm", "use_aux_norm") if at("0.5.12") else (),  # #24663
        "norm_output": ("norm_output",) if at("0.5.12") else (),
    }
    mla = {  # kimi_k25_eagle3.py: no input_norm up to 0.5.23; 3.1 flags from 0.5.13 (#26506)
        "norm_before_fc": (),
        "fc_norm": ("fc_norm", "use_aux_norm") if at("0.5.13") else (),
        "norm_output": ("norm_output",) if at("0.5.13") else (),
    }
    reads = {("llama", "specforge"): llama}
    if at("0.5.12"):
        reads[("mla", "specforge")] = mla
    mla_classes = frozenset({MLA_CLASS}) if at("0.5.12") else frozenset()
    return Release(
        engine="sglang", version=version, architectures=frozenset({LLAMA_CLASS}) | mla_classes,
        mla_architectures=mla_classes, reads=reads, mla_fc_norm_applied=True, mla_needs_q_lora_rank=True,
        target_model_types=None, deepseek_first_id_rule=at("0.5.13"), gpt_oss_boundary_rule=at("0.5.17"),
        final_boundary_families=("gpt_oss",) if at("0.5.17") else (),  # gpt_oss.py: max(ids) == L verbatim
        batch_schedule=at(SCHEDULE_FIRST["sglang"]), schedule_zero=at(SCHEDULE_ZERO_FIRST["sglang"]),
    )


def _vllm(version: str) -> Release:
    v = version_key(version)
    at = lambda first: v >= version_key(first)  # noqa: E731
    llama_hf = {
        # top-level getattr from 0.18.0 (#36545), nested eagle_config first from 0.22.0 (#42143)
        "norm_before_fc": (("eagle_config.norm_before_fc", "norm_before_fc") if at("0.22.0")
                           else ("norm_before_fc",) if at("0.18.0") else ()),
        "fc_norm": ("fc_norm",) if at("0.22.0") else (),  # #42764
        "norm_output": ("norm_output",) if at("0.22.0") else (),
    }
    llama_speculators = {  # copied by algos.update_eagle3
        "norm_before_fc": ("norm_before_fc",) if at("0.19.0") else (),  # #38111 (0.18.0 dropped it)
        "fc_norm": ("fc_norm",) if at("0.25.0") else (),  # #46488
        "norm_output": ("norm_output",) if at("0.25.0") else (),
    }
    mla = {  # deepseek_eagle3.py: no norm_before_fc up to 0.34.0; fc_norm built from 0.22.0, applied from 0.23.0
        "norm_before_fc": (),
        "fc_norm": ("fc_norm",) if at("0.22.0") else (),
        "norm_output": ("norm_output",) if at("0.22.0") else (),
    }
    reads = {("llama", "specforge"): llama_hf, ("llama", "speculators"): llama_speculators}
    if at("0.18.0"):
        reads[("mla", "specforge")] = mla
    mla_classes = _VLLM_MLA if at("0.18.0") else frozenset()
    runners = ("V1",) if not at("0.22.0") else ("MRV2",) if at("0.34.0") else ("V1", "MRV2")
    return Release(
        engine="vllm", version=version, architectures=_VLLM_LLAMA | mla_classes, mla_architectures=mla_classes,
        reads=reads, mla_fc_norm_applied=at("0.23.0"), mla_needs_q_lora_rank=False,
        # the allow-list predates the releases that serve DeepSeek/Kimi MLA drafters (0.18.0)
        target_model_types=None if at("0.18.0") else ("llama", "qwen", "minicpm", "gpt_oss"),
        runners=runners, fc_from_num_aux=at("0.22.0"),
        final_boundary_families=tuple(t for first, types in VLLM_FINAL_BOUNDARY if at(first) for t in types),
        # llama_eagle3.py, qwen3_eagle3.py, deepseek_eagle3.py: ``if self.config.draft_vocab_size !=
        # target_vocab_size`` around the parameter (0.30.0); 0.29.0 always creates it
        d2t_needs_pruned_vocab=at("0.30.0"),
        batch_schedule=at(SCHEDULE_FIRST["vllm"]), schedule_zero=at(SCHEDULE_ZERO_FIRST["vllm"]),
    )


RELEASES: dict[tuple[str, str], Release] = {
    **{("sglang", v): _sglang(v) for v in SGLANG_VERSIONS},
    **{("vllm", v): _vllm(v) for v in VLLM_VERSIONS},
}


def newest(engine: str) -> str:
    """The newest release draftlab knows of ``engine`` (the default everywhere)."""
    return VERSIONS[engine][-1]


def release(engine: str, version: str | None = None) -> Release:
    """The rules of ``engine`` at ``version`` (None: the newest known): those of the newest known release at
    or below it (:func:`resolve`)."""
    if engine not in VERSIONS:
        raise DraftlabError(f"unknown engine {engine!r}; choose one of {', '.join(VERSIONS)}")
    return RELEASES[(engine, newest(engine) if version is None else resolve(engine, version))]


@cache  # one warning per version and process, however many commands ask
def resolve(engine: str, version: str) -> str:
    """The known release whose rules apply to ``version``: the newest known at or below it. A version newer
    than the newest known gets the newest, with one warning on stderr naming it; an older or empty one is
    refused in one line."""
    known, name = VERSIONS[engine], NAMES[engine]
    if not version.strip():
        raise DraftlabError(f"--engine-version is empty: name the {name} release (draftlab knows {known[0]} to "
                            f"{known[-1]}), or leave the option out for the newest")
    wanted = version_key(version.strip())
    if wanted < version_key(known[0]):
        raise DraftlabError(f"--engine-version {version}: {name} releases before {known[0]} are not known to "
                            f"draftlab (it knows {known[0]} to {known[-1]})")
    if wanted > version_key(known[-1]):
        err_console.print(f"warning: {name} {version} is newer than the newest release draftlab knows; "
                          f"using {name} {known[-1]}'s rules", markup=False, soft_wrap=True)
    return max((v for v in known if version_key(v) <= wanted), key=version_key)


def target_family(model_type: str | None) -> str:
    """"deepseek" (DeepSeek V2/V3, Kimi K2.x, GLM-4-MoE-lite), "gpt_oss", "llama" or "other"."""
    kind = (model_type or "").lower()
    if kind in DEEPSEEK_FAMILY or kind.startswith(("deepseek", "kimi")):
        return "deepseek"
    if kind in GPT_OSS_FAMILY:
        return "gpt_oss"
    return "llama" if kind == "llama" else "other"


def first_release(engine: str, flag: str, drafter_class: str, layout: str) -> str | None:
    """The first known release of ``engine`` that reads ``flag`` for this drafter class and layout."""
    for version in VERSIONS[engine]:
        if RELEASES[(engine, version)].places(flag, drafter_class, layout):
            return version
    return None


def first_mla_release(engine: str) -> str:
    """The first known release of ``engine`` that registers an MLA drafter."""
    return next(v for v in VERSIONS[engine] if RELEASES[(engine, v)].mla_architectures)


def first_serving(engine: str, model_type: str) -> str | None:
    """The first known release of ``engine`` that serves EAGLE-3 on a target of this model_type."""
    return next((v for v in VERSIONS[engine] if RELEASES[(engine, v)].serves_target(model_type)), None)
