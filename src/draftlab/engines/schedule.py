"""A per-batch-size speculation schedule in each engine's own format, and read back the engine's way.

Formats (engine-interop.md sections 1, 3b, 4; the rules below were read in the engines' code):

- vLLM 0.24+ (PR #32374; ``vllm/v1/spec_decode/dynamic/utils.py``,
  ``validate_and_normalize_dynamic_sd_schedule`` and ``build_dynamic_sd_schedule_lookup``, identical
  0.24.0-0.34.0): keys inside ``--speculative-config``, ``num_speculative_tokens`` (the start-up
  maximum) and ``num_speculative_tokens_per_batch_size``, a list of inclusive ``[lo, hi, K]``; the
  first range starts at 1, ranges do not overlap, K >= 0; the runtime K is min(num_speculative_tokens,
  K); gaps and batches above the last range keep the previous K, so a 0 must be written out.
- SGLang 0.5.13+ (PR #24055; ``srt/speculative/adaptive_spec_params.py::_load_adaptive_config``,
  ``adaptive_step_router.py::AdaptiveStepRouter``): a JSON file for ``--speculative-adaptive-config``
  (with ``--speculative-adaptive``), ``{"<lower bound>": {"candidate_steps": [K]}}``; a batch goes to
  the largest key at or below it (after padding to a CUDA-graph batch size), below the smallest key to
  the smallest. One candidate per slot pins its steps (the EMA has nothing to choose); steps 0 switch
  speculation off from 0.5.14. ``--speculative-num-steps`` must be one of the candidates, topk 1.
- TensorRT-LLM (``tensorrt_llm/llmapi/llm_args.py``, ``DecodingBaseConfig.draft_len_schedule`` and
  ``validate_draft_len_schedule_and_sort``; ``_torch/speculative/utils.py::get_draft_len_for_batch_size``,
  upper-bound reading since PR #10860, 1.3.0rc27+ docs): ``{"max_draft_len": K1, "draft_len_schedule":
  {"<inclusive upper bound>": K}}`` in ``speculative_config``; the smallest key's K must equal
  ``max_draft_len`` and none may exceed it; above the largest key speculation is off.

A schedule arrives as ranges (:mod:`draftlab.cost.schedule` chooses them from a plan) and is written with
equal neighbours merged.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftlab import jsonio
from draftlab.documents import to_jsonable
from draftlab.engines.releases import (
    SCHEDULE_FIRST,
    SCHEDULE_ZERO_FIRST,
    TRTLLM_VERSIONS,
    release,
)
from draftlab.errors import DraftlabError

SCHEDULE_ENGINES = ("sglang", "vllm", "trtllm")
NAMES = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM"}
VLLM_KEY = "num_speculative_tokens_per_batch_size"
TRTLLM_KEY = "draft_len_schedule"

Ranges = list[tuple[int, int, int]]  # inclusive (lo, hi, K)


RULE = ("each planned batch size starts a range that runs to the next planned size - 1 (the first from 1, "
        "the last to the largest batch the schedule covers)")


@dataclass(frozen=True)
class ScheduleRange:
    """Batches ``lo``..``hi`` (inclusive) draft ``draft_length`` tokens; the prediction it was chosen by."""

    lo: int
    hi: int
    draft_length: int  # 0: no speculation
    planned_batch: int  # the planned batch size the choice was made at
    tokens_per_second: float  # predicted at planned_batch with draft_length
    baseline_tokens_per_second: float  # predicted at planned_batch without speculation

    @property
    def speedup(self) -> float:
        return self.tokens_per_second / self.baseline_tokens_per_second


@dataclass(frozen=True)
class BatchSchedule:
    """Contiguous ranges from batch 1 to ``max_batch_size``, one per planned batch size."""

    ranges: list[ScheduleRange]
    max_batch_size: int
    rule: str = RULE
    notes: list[str] = field(default_factory=list)

    @property
    def max_draft_length(self) -> int:
        return max(r.draft_length for r in self.ranges)


@dataclass(frozen=True)
class EngineSchedule:
    """A schedule written for one engine release: ``value`` is exactly what that engine reads."""

    engine: str
    version: str
    value: dict[str, Any]
    ranges: Ranges  # as written (equal neighbours merged)
    plan: BatchSchedule | None = None  # the per-planned-batch choice it came from
    notes: list[str] = field(default_factory=list)

    @property
    def max_draft_length(self) -> int:
        return max(k for _, _, k in self.ranges)

    def draft_length(self, batch_size: int) -> int:
        """The K this engine runs at ``batch_size`` under its own reading of ``value``."""
        return draft_length_for(self.engine, self.value, batch_size)

    def summary(self) -> dict[str, Any]:
        """Everything about the schedule but the engine-format object itself (that is ``value``)."""
        return {"engine": self.engine, "version": self.version, "ranges": [list(r) for r in self.ranges],
                "planned": to_jsonable(self.plan), "notes": self.notes}


def draft_length_cap(engine: str, schedule: BatchSchedule) -> tuple[int | None, str | None]:
    """The K no range may exceed in ``engine``'s format, and why (None, None: no cap). TensorRT-LLM: every
    range's K is at most the smallest key's, which must equal ``max_draft_len``."""
    first = schedule.ranges[0].draft_length
    if engine == "trtllm" and first and schedule.max_draft_length > first:
        return first, (f"TensorRT-LLM: every range's K is capped at batch 1's ({first}), which must equal "
                       "max_draft_len; the capped ranges take the best K up to it")
    return None, None


def write_schedule(schedule: BatchSchedule, engine: str, version: str | None = None, *,
                   notes: list[str] | None = None, all_off: bool = False) -> EngineSchedule:
    """``schedule`` in ``engine``'s format; refused where that release (or engine) cannot say it. Where
    speculation loses at every planned batch size there is nothing to serve with a drafter: an error,
    or with ``all_off`` (``plan --schedule``: a finding, not bad input) the schedule with K = 0 at every
    batch size, the verdict in its notes."""
    version = check_release(engine, version)
    ranges = merged([(r.lo, r.hi, r.draft_length) for r in schedule.ranges])
    notes = list(schedule.notes if notes is None else notes)
    top = max(k for _, _, k in ranges)
    if top == 0:
        best = max(schedule.ranges, key=lambda r: r.speedup)
        why = (f"speculation loses at every planned batch size (plain decoding is predicted faster even at batch "
               f"{best.planned_batch})")
        if not all_off:
            raise DraftlabError(f"{why}; there is no schedule to write: serve without a drafter")
        notes.append(f"{why}: serve without a drafter (this schedule switches speculation off at every batch size)")
    name = f"{NAMES[engine]} {version}"
    if top and any(k == 0 for _, _, k in ranges) and engine != "trtllm" and not release(engine, version).schedule_zero:
        raise DraftlabError(f"{name} cannot switch speculation off for a batch-size range (steps 0 needs "
                            f"{NAMES[engine]} {SCHEDULE_ZERO_FIRST[engine]}+); use a newer --engine-version")
    if engine == "vllm":
        value: dict[str, Any] = {"num_speculative_tokens": top, VLLM_KEY: [[lo, hi, k] for lo, hi, k in ranges]}
        notes.append(f"above batch {ranges[-1][1]} vLLM keeps K={ranges[-1][2]}")
    elif engine == "sglang":
        value = {str(lo): {"candidate_steps": [k]} for lo, _, k in ranges}
        notes.append("SGLang pads a batch up to its next CUDA-graph batch size before picking the slot, so a "
                     "batch takes the draft length of its padded size (batch 3 with graphs 2 and 4: batch 4's)")
    else:
        if top and ranges[0][2] == 0:
            raise DraftlabError(f"{name}: speculation loses at batch 1, but TensorRT-LLM's smallest schedule key "
                                "must equal max_draft_len (> 0 for EAGLE-3); serve without a drafter")
        value = {"max_draft_len": ranges[0][2], TRTLLM_KEY: {str(hi): k for _, hi, k in ranges}}
        notes.append(f"above batch {ranges[-1][1]} TensorRT-LLM switches speculation off")
    return EngineSchedule(engine, version, value, ranges, schedule, notes)


def check_release(engine: str, version: str | None) -> str:
    """The release to write for (default: newest known); refuses one without a batch-size schedule."""
    if engine not in SCHEDULE_ENGINES:
        raise DraftlabError(f"--schedule {engine!r}: choose one of {', '.join(SCHEDULE_ENGINES)}")
    if engine == "trtllm":
        version = TRTLLM_VERSIONS[-1] if version is None else version  # '' is refused below, never the newest
        if version not in TRTLLM_VERSIONS:
            raise DraftlabError(f"--engine-version {version!r} is not a TensorRT-LLM release draftlab knows a "
                                f"draft_len_schedule for; choose one of {', '.join(TRTLLM_VERSIONS)}")
        return version
    rel = release(engine, version)
    if not rel.batch_schedule:
        raise DraftlabError(f"{rel.name} takes no per-batch-size draft length (it arrived in {NAMES[engine]} "
                            f"{SCHEDULE_FIRST[engine]}); use --engine-version {SCHEDULE_FIRST[engine]} or newer")
    return rel.version


def merged(ranges: Ranges) -> Ranges:
    """Neighbouring ranges with the same K as one."""
    out: Ranges = []
    for lo, hi, k in ranges:
        if out and out[-1][2] == k and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi, k)
        else:
            out.append((lo, hi, k))
    return out


# --- reading a schedule back ----------------------------------------------------------------------


def detect_engine(value: object) -> str:
    """Which engine's format ``value`` is in; DraftlabError when none."""
    if isinstance(value, dict):
        if VLLM_KEY in value:
            return "vllm"
        if TRTLLM_KEY in value:
            return "trtllm"
        if value and all(isinstance(k, str) and k.isdigit() for k in value):
            return "sglang"
    raise DraftlabError(f"not a schedule: expected vLLM's {{{VLLM_KEY!r}: ...}}, SGLang's adaptive config "
                        f"{{\"1\": {{\"candidate_steps\": [K]}}, ...}} or TensorRT-LLM's {{{TRTLLM_KEY!r}: ...}}; "
                        "write one with draftlab plan --schedule ENGINE --schedule-out FILE")


def schedule_ranges(engine: str, value: dict[str, Any]) -> Ranges:
    """The (lo, hi, K) ranges ``value`` states (the last hi: its largest batch), checked by the engine's rules."""
    try:
        if engine == "vllm":
            ranges = sorted((int(lo), int(hi), int(k)) for lo, hi, k in value[VLLM_KEY])
            cap = int(value.get("num_speculative_tokens", max(k for *_, k in ranges)))
            bad = (not ranges or ranges[0][0] != 1 or any(lo > hi or k < 0 for lo, hi, k in ranges)
                   or any(b[0] <= a[1] for a, b in zip(ranges, ranges[1:])) or cap < 1)
            return [] if bad else [(lo, hi, min(k, cap)) for lo, hi, k in ranges]
        if engine == "sglang":
            slots = sorted((int(key), entry["candidate_steps"]) for key, entry in value.items())
            if any(len(c) != 1 or not isinstance(c[0], int) or c[0] < 0 for _, c in slots):
                raise DraftlabError("an SGLang slot with several candidate_steps adapts at run time (EMA); draftlab "
                                    "runs fixed schedules only: give each slot one candidate")
            los = [1] + [key for key, _ in slots[1:]]
            his = [key - 1 for key, _ in slots[1:]] + [max(slots[-1][0], 1)]
            return [(lo, hi, c[0]) for lo, hi, (_, c) in zip(los, his, slots)]
        table = sorted((int(key), int(k)) for key, k in value[TRTLLM_KEY].items())
        top = int(value.get("max_draft_len", table[0][1] if table else 0))
        if not table or table[0][0] < 1 or table[0][1] != top or any(k < 0 or k > top for _, k in table):
            return []
        return [(1 if i == 0 else table[i - 1][0] + 1, key, k) for i, (key, k) in enumerate(table)]
    except (KeyError, TypeError, ValueError, AttributeError):
        return []


def draft_length_for(engine: str, value: dict[str, Any], batch_size: int) -> int:
    """The K ``engine`` runs at ``batch_size`` (vLLM: the last range's K above it; SGLang: the slot of
    the largest key at or below it, no CUDA-graph padding; TensorRT-LLM: the first key at or above it,
    0 above the largest)."""
    ranges = schedule_ranges(engine, value)
    if engine == "trtllm":
        keys = [hi for _, hi, _ in ranges]
        i = bisect.bisect_left(keys, batch_size)
        return ranges[i][2] if i < len(ranges) else 0
    k = ranges[0][2]
    for lo, _, kk in ranges:
        if lo <= batch_size:
            k = kk
    return k


@dataclass(frozen=True)
class LoadedSchedule:
    """A schedule file, its engine format and what it asks of the server."""

    path: str
    engine: str
    value: dict[str, Any]
    ranges: Ranges

    @property
    def max_draft_length(self) -> int:
        return max(k for _, _, k in self.ranges)

    @property
    def steps(self) -> list[int]:
        """Every K it uses, ascending (SGLang's candidate union)."""
        return sorted({k for _, _, k in self.ranges})

    def draft_length(self, batch_size: int) -> int:
        return draft_length_for(self.engine, self.value, batch_size)


def load_schedule(path: str | Path, *, option: str = "--schedule") -> LoadedSchedule:
    """Read a schedule file written by ``plan --schedule-out`` (or by hand); DraftlabError if it is not one."""
    value = jsonio.read(path, "no such file; write one with draftlab plan --schedule ENGINE --schedule-out FILE",
                        option=option)
    try:
        engine = detect_engine(value)
    except DraftlabError as exc:
        raise DraftlabError(f"{option}: {exc}", path=path) from None
    ranges = schedule_ranges(engine, value)
    if not ranges:
        raise DraftlabError(f"{option} {path}: not a valid {NAMES[engine]} schedule (ranges from batch 1, in order, "
                            "K >= 0 and within the maximum); write one with draftlab plan --schedule")
    loaded = LoadedSchedule(str(Path(path).resolve()), engine, value, ranges)
    if loaded.max_draft_length == 0:
        raise DraftlabError(f"{option} {path}: the schedule switches speculation off at every batch size; "
                            "launch without --drafter instead")
    return loaded


def check_for_engine(schedule: LoadedSchedule, engine: str, version: str | None) -> None:
    """Refuse a schedule that ``engine`` at ``version`` would not read as written."""
    if schedule.engine != engine:
        raise _other_engine(schedule, engine)
    version = check_release(engine, version)
    if 0 in schedule.steps and engine != "trtllm" and not release(engine, version).schedule_zero:
        raise DraftlabError(f"{NAMES[engine]} {version} cannot switch speculation off for a batch-size range "
                            f"(steps 0 needs {SCHEDULE_ZERO_FIRST[engine]}+); use a newer --engine-version")


def _other_engine(schedule: LoadedSchedule, engine: str) -> DraftlabError:
    return DraftlabError(f"--schedule {schedule.path} is a {NAMES[schedule.engine]} schedule; write one for "
                         f"{NAMES[engine]} with draftlab plan --schedule {engine} --schedule-out FILE")


def dumps(value: dict[str, Any]) -> str:
    """The schedule as the file ``--schedule-out`` writes."""
    return json.dumps(value, indent=2) + "\n"


# --- launching with a schedule ----------------------------------------------------------------------


def schedule_steps(schedule: LoadedSchedule, engine: str, steps: int | None, topk: int | None,
                   num_draft_tokens: int | None) -> int:
    """The start-up chain length an engine needs to run ``schedule`` (vLLM's num_speculative_tokens,
    SGLang's --speculative-num-steps): the largest K unless given; refuses flags the schedule contradicts."""
    top = schedule.max_draft_length
    if topk not in (None, 1):
        raise DraftlabError(f"--topk {topk}: a batch-size schedule drafts chains; use --topk 1 or leave it out")
    steps = top if steps is None else steps
    if steps < top:
        raise DraftlabError(f"--steps {steps} is below the schedule's largest draft length {top} (the engine would "
                            f"clamp it); use --steps {top} or leave it out")
    if engine == "sglang" and steps not in schedule.steps:
        raise DraftlabError(f"--steps {steps}: SGLang needs --speculative-num-steps to be one of the schedule's "
                            f"candidate steps ({', '.join(map(str, schedule.steps))}); leave --steps out")
    if num_draft_tokens is not None and num_draft_tokens != steps + 1:
        raise DraftlabError(f"--num-draft-tokens {num_draft_tokens}: a chain of {steps} verifies {steps + 1} tokens; "
                            f"use {steps + 1} or leave it out")
    return steps


def launch_args(schedule: LoadedSchedule, engine: str) -> tuple[dict[str, Any], list[str], str]:
    """What carries ``schedule`` to the server: keys to add to vLLM's --speculative-config, extra argv
    (SGLang's --speculative-adaptive flags, draftlab serve's --schedule), and a note."""
    if engine in ("vllm", "sglang") and schedule.engine != engine:
        raise _other_engine(schedule, engine)
    if engine == "vllm":
        return ({VLLM_KEY: schedule.value[VLLM_KEY]}, [],
                f"draft length per batch size from {schedule.path}, inside --speculative-config")
    if engine == "sglang":
        return ({}, ["--speculative-adaptive", "--speculative-adaptive-config", schedule.path],
                f"draft length per batch size from {schedule.path} (one candidate per slot: SGLang's EMA cannot move it)")
    return {}, ["--schedule", schedule.path], f"draft length per batch size from {schedule.path} ({NAMES[schedule.engine]} format)"
