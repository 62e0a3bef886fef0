"""From a plan to a speculation schedule: the draft length per batch-size range that maximises
predicted throughput, 0 where plain decoding is predicted faster.

Engines switch the draft length by batch size (vLLM's ``num_speculative_tokens_per_batch_size``,
SGLang's adaptive-steps slots, TensorRT-LLM's ``draft_len_schedule``); all three take a *chain*
length, so only the plan's chain configs (topk 1, ``num_draft_tokens = steps + 1``) are candidates. A
schedule serves one drafting model: the EAGLE-3 drafter's chains, or where the plan has none (a plan of
``probe --drafter mtp``), the target's own MTP head's. SGLang's adaptive steps take MTP served as EAGLE and
vLLM's schedule is its scheduler's, whatever the method (engine-interop.md sections 1 and 3b); TensorRT-LLM
applies one only in modes with a dynamic draft length, not confirmed for MTP, which the schedule's notes say.
:mod:`draftlab.engines.schedule` writes the result in each engine's format.

Between planned batch sizes (:data:`RULE`): the plan is made at discrete batch sizes (say 1, 8, 32);
each planned size starts a range that runs up to the next planned size minus one, and the first range
starts at 1. So the K chosen at batch 8 serves batches 8-31: a batch size is served by the largest
planned size at or below it. That is SGLang's own reading of its slot keys (lower bounds), so its file
states the plan exactly, and vLLM's and TensorRT-LLM's ranges are the same ones. The last range ends
at ``max_batch_size`` (default: the largest planned size); above it vLLM and SGLang keep the last K,
TensorRT-LLM switches speculation off.
"""

from __future__ import annotations

from draftlab.cost.plan import ConfigPlan, Plan
from draftlab.engines.schedule import (
    BatchSchedule,
    EngineSchedule,
    ScheduleRange,
    check_release,
    draft_length_cap,
    write_schedule,
)
from draftlab.errors import DraftlabError

DRAFTING_MODELS = ("eagle3", "mtp")  # the methods a schedule can serve, in the order one is chosen


def chain_length(row: ConfigPlan) -> int | None:
    """The chain length of a plan row (its steps), None for a tree config or a model-free method."""
    chain = row.method in DRAFTING_MODELS and row.topk == 1 and row.num_draft_tokens == row.steps + 1
    return row.steps if chain else None


def scheduled_method(plan: Plan) -> str | None:
    """The drafting model a schedule of ``plan`` serves: the first of :data:`DRAFTING_MODELS` with a chain."""
    chained = {r.method for r in plan.configs if chain_length(r) is not None}
    return next((m for m in DRAFTING_MODELS if m in chained), None)


def _rate(row: ConfigPlan) -> float:
    """The tok/s a schedule is chosen by: the served prediction where the plan has one (``plan --served``)."""
    return row.tokens_per_second if row.served_tokens_per_second is None else row.served_tokens_per_second


def schedule_from_plan(plan: Plan, *, max_batch_size: int | None = None,
                       max_draft_length: int | None = None) -> BatchSchedule:
    """The best chain length per planned batch size (0 where none beats plain decoding), as ranges; by
    the predictions for ``draftlab serve`` when the plan has them.

    ``max_draft_length`` caps the choice (the best K at or below it), for engines that bound every
    range by the first one's K.
    """
    batches = sorted(plan.baseline_tokens_per_second)
    chains = [r for r in plan.configs if chain_length(r) is not None]
    if not chains:
        raise DraftlabError("the plan has no chain configs (topk 1, num_draft_tokens = steps + 1), the only shape an "
                            "engine's batch-size schedule takes; plan a grid like 1/1/2,2/1/3,3/1/4,4/1/5")
    method = scheduled_method(plan)
    chains = [r for r in chains if r.method == method]
    top = max_batch_size if max_batch_size is not None else batches[-1]
    if top < batches[-1]:
        raise DraftlabError(f"the schedule's largest batch size {top} is below the largest planned one "
                            f"({batches[-1]}); raise it or plan fewer batch sizes")
    notes = []
    served = plan.served_baseline_tokens_per_second
    if served is not None:
        notes.append(f"chosen by the predictions for draftlab serve (plan --served: requests of "
                     f"{plan.served_request_tokens} new tokens)")
    if method == "mtp":
        notes.append("the target's own MTP head's chain lengths (the plan has no EAGLE-3 chain config)")
    trees = sorted({r.label for r in plan.configs if r.method in DRAFTING_MODELS and chain_length(r) is None})
    if trees:
        notes.append(f"tree configs left out (engines schedule chain lengths only): {', '.join(trees)}")
    others = sorted({r.label for r in plan.configs if r.method != method and chain_length(r) is not None})
    if others:
        notes.append(f"the MTP head's chains left out (a schedule serves one drafting model): {', '.join(others)}")
    ranges = []
    for i, b in enumerate(batches):
        lo = 1 if i == 0 else b
        hi = batches[i + 1] - 1 if i + 1 < len(batches) else top
        base = plan.baseline_tokens_per_second[b] if served is None else served[b]
        options = [r for r in chains if r.batch_size == b
                   and (max_draft_length is None or r.steps <= max_draft_length)]
        best = max(options, key=_rate, default=None)
        if best is None or _rate(best) <= base:
            ranges.append(ScheduleRange(lo, hi, 0, b, base, base))
        else:
            ranges.append(ScheduleRange(lo, hi, best.steps, b, _rate(best), base))
    return BatchSchedule(ranges, top, notes=notes)


def engine_schedule(plan: Plan, engine: str, version: str | None = None, *,
                    max_batch_size: int | None = None, all_off: bool = False) -> EngineSchedule:
    """The plan's best chain length per batch-size range, in ``engine``'s format for ``version``
    (default: the newest release draftlab knows); DraftlabError for a release without the feature.
    ``all_off``: K = 0 everywhere where speculation always loses, not an error (:func:`write_schedule`)."""
    version = check_release(engine, version)
    schedule = schedule_from_plan(plan, max_batch_size=max_batch_size)
    notes = list(schedule.notes)
    cap, why = draft_length_cap(engine, schedule)
    if cap is not None:
        schedule = schedule_from_plan(plan, max_batch_size=max_batch_size, max_draft_length=cap)
        notes.append(why)
    if engine == "trtllm" and scheduled_method(plan) == "mtp":
        notes.append("TensorRT-LLM takes draft_len_schedule in modes with a dynamic draft length; whether its MTP "
                     "mode is one is not confirmed")
    return write_schedule(schedule, engine, version, notes=notes, all_off=all_off)
