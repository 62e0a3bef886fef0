"""What each SGLang and vLLM release reads from an EAGLE-3 drafter: one :class:`Release` per release.

Every fact is from ``../shared/reference/drafter-variants.md`` (read in the released packages' code;
the PR that brought each change is named beside it), sections 1-5 and the table in section 8:

- which drafter classes a release registers (the MLA drafter ``Eagle3DeepseekV2ForCausalLM``:
  SGLang 0.5.12 #24826, vLLM 0.18.0 #36361, with the alias ``Eagle3DeepseekV3ForCausalLM``);
- where it reads each variant flag (``norm_before_fc``, ``fc_norm``, ``norm_output``), per drafter
  class (Llama / MLA) and config layout, as dotted config paths in lookup order;
- how it reads aux-layer ids (SGLang's ``+1`` rules per target family, vLLM's runners);
- how its Llama drafter sizes ``fc`` (vLLM 0.22+: ``num_aux_hidden_states``, else the nested ids).

Only the releases the note checked are known; asking for another is refused, naming them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from draftlab.errors import DraftlabError

SGLANG_VERSIONS = ("0.5.10", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.15", "0.5.16", "0.5.17", "0.5.19",
                   "0.5.21", "0.5.23")
VLLM_VERSIONS = ("0.17.1", "0.18.0", "0.19.0", "0.21.0", "0.22.0", "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0",
                 "0.29.0", "0.31.0", "0.33.0", "0.34.0")
VERSIONS = {"sglang": SGLANG_VERSIONS, "vllm": VLLM_VERSIONS}
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

Places = tuple[str, ...]  # dotted config paths a flag is read from, in lookup order; () = not read


def version_key(version: str) -> tuple[int, ...]:
    """``"0.5.12.post1"`` -> (0, 5, 12, 1); ``"0.5.12"`` -> (0, 5, 12, 0)."""
    parts = version.split(".")
    post = int(parts[3].removeprefix("post")) if len(parts) > 3 else 0
    return (*(int(p) for p in parts[:3]), post)


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
    # vLLM aux capture: runners that exist and read nested eagle_config ids (V1 0.22-0.33), the runner a
    # target gets by default, and the target families whose final boundary (id L) can be captured
    runners: tuple[str, ...] = ()
    final_boundary_families: tuple[str, ...] = ()
    fc_from_num_aux: bool = False  # llama_eagle3 sizes fc from num_aux_hidden_states / nested ids / 3
    # per-batch-size draft length (SCHEDULE_FIRST) and whether a range may say K = 0 (SCHEDULE_ZERO_FIRST)
    batch_schedule: bool = False
    schedule_zero: bool = False

    @property
    def name(self) -> str:
        return f"{'SGLang' if self.engine == 'sglang' else 'vLLM'} {self.version}"

    def places(self, flag: str, drafter_class: str, layout: str) -> Places:
        """Where this release reads ``flag`` for a drafter of that class and layout (() = nowhere)."""
        return self.reads.get((drafter_class, layout), {}).get(flag, ())

    def default_runner(self, moe_target: bool) -> str | None:
        """The vLLM runner a target gets without ``VLLM_USE_V2_MODEL_RUNNER`` (None: not pinned down)."""
        if self.runners == ("V1",) or self.runners == ("MRV2",):
            return self.runners[0]
        v = version_key(self.version)
        if v < (0, 25, 0, 0):  # 0.22-0.24: V2 only for a list of dense, unquantised archs
            return "V1" if moe_target else None
        if v <= (0, 27, 0, 0):  # 0.25-0.27: listed archs or any non-MoE target
            return "MRV2" if not moe_target else None
        if v >= (0, 33, 0, 0):  # 0.33: V2 for everything it supports
            return "MRV2"
        return None  # 0.29, 0.31: not researched


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
    boundary = (("deepseek",) if at("0.25.0") else ()) + (("llama",) if at("0.34.0") else ())
    return Release(
        engine="vllm", version=version, architectures=_VLLM_LLAMA | mla_classes, mla_architectures=mla_classes,
        reads=reads, mla_fc_norm_applied=at("0.23.0"), mla_needs_q_lora_rank=False,
        # the allow-list predates the releases that serve DeepSeek/Kimi MLA drafters (0.18.0)
        target_model_types=None if at("0.18.0") else ("llama", "qwen", "minicpm", "gpt_oss"),
        runners=runners, final_boundary_families=boundary, fc_from_num_aux=at("0.22.0"),
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
    """The rules of ``engine`` at ``version`` (None: the newest known); an unknown version is refused."""
    if engine not in VERSIONS:
        raise DraftlabError(f"unknown engine {engine!r}; choose one of {', '.join(VERSIONS)}")
    found = RELEASES.get((engine, version or newest(engine)))
    if found is None:
        raise DraftlabError(f"--engine-version {version!r} is not a {engine} release draftlab knows; choose one of "
                            f"{', '.join(VERSIONS[engine])}")
    return found


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
