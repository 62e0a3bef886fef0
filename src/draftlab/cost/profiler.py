"""Measure the passes of a speculative cycle and assemble a :class:`~draftlab.cost.profile.Profile`.

The passes come as a :class:`Workload`: factories that, given (batch size, tokens per sequence),
build their inputs and return the callable to time. The reference runtime supplies them for a real
target and drafter (target forward for verify and decode, drafter forward for draft steps and
draft-extend); tests supply plain torch callables.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace

import torch
from rich.console import Console

import draftlab
from draftlab.cost.model import SpecConfig
from draftlab.cost.outliers import out_of_line
from draftlab.cost.overhead import (
    CALIBRATION,
    CycleRunner,
    CycleSample,
    Overhead,
    fit_overhead,
)
from draftlab.cost.profile import AllReduceCosts, CostTable, ModelInfo, Profile
from draftlab.cost.timing import Job, measure_jobs, timer_name
from draftlab.errors import DraftlabError

PassFactory = Callable[[int, int], Callable[[], object]]
MTP_BATCH = 1  # the batch size the MTP head's decoder runs (one prompt at a time), where its overhead is fitted


@dataclass(frozen=True)
class Workload:
    """The passes to time. ``draft_step`` (and ``mtp_draft_step``, the target's own MTP head's) gets rows per
    sequence (topk), the others tokens; ``cycles`` runs the decoder's real cycles, to measure its overhead
    beyond the passes (``mtp_cycles``: with the MTP head drafting, at batch size 1 only)."""

    model: ModelInfo
    device: torch.device
    verify: PassFactory
    draft_step: PassFactory | None = None
    draft_extend: PassFactory | None = None
    mtp_draft_step: PassFactory | None = None
    mtp_draft_extend: PassFactory | None = None
    context_tokens: int = 0
    cycles: CycleRunner | None = None
    mtp_cycles: CycleRunner | None = None


def profile_costs(
    workload: Workload,
    *,
    batch_sizes: Sequence[int],
    verify_tokens: Sequence[int],
    draft_rows: Sequence[int] = (1,),
    extend_tokens: Sequence[int] = (1,),
    warmup: int = 3,
    repeats: int = 10,
    rounds: int = 3,
    overhead_ms: float = 0.0,
    allreduce: AllReduceCosts | None = None,
    measure_overhead: bool = True,
    progress: bool = True,
) -> Profile:
    """Time every pass at every size (progress bar on stderr; ``repeats`` calls each, over ``rounds``
    interleaved passes: :func:`draftlab.cost.timing.measure_jobs`) and return the profile. With a drafter
    and ``measure_overhead``, also the decoder's own per-cycle work (:mod:`draftlab.cost.overhead`),
    for which the calibration chains' sizes are measured too; with the MTP head, its decoder's at batch 1."""
    sizes = [*batch_sizes, *verify_tokens, *draft_rows, *extend_tokens]
    if not sizes or min(sizes) < 1:
        raise DraftlabError("batch sizes, verify tokens, draft rows and extend tokens must be >= 1")
    if 1 not in verify_tokens:
        raise DraftlabError("--verify-tokens must include 1: the decode step is a 1-token verify")
    if overhead_ms < 0:
        raise DraftlabError(f"--overhead-ms must be >= 0, got {overhead_ms}")
    fit_drafter = measure_overhead and workload.cycles is not None and workload.draft_step is not None
    fit_head = measure_overhead and workload.mtp_cycles is not None and workload.mtp_draft_step is not None \
        and MTP_BATCH in batch_sizes
    calibrate = fit_drafter or fit_head
    head_trees = max(draft_rows, default=1) > 1  # the head drafts trees only where its rows were asked for
    if calibrate:
        verify_tokens = sorted({*verify_tokens, *(c.num_draft_tokens for c in CALIBRATION)})
        draft_rows = sorted({*draft_rows, *(c.topk for c in CALIBRATION if fit_drafter or head_trees)})
        extend_tokens = sorted({*extend_tokens, *range(1, max(c.steps for c in CALIBRATION) + 2)})
    sections: list[tuple[str, PassFactory | None, Sequence[int]]] = [
        ("verify", workload.verify, verify_tokens),
        ("draft_step", workload.draft_step, draft_rows),
        ("draft_extend", workload.draft_extend, extend_tokens),
        ("mtp_draft_step", workload.mtp_draft_step, draft_rows),
        ("mtp_draft_extend", workload.mtp_draft_extend, extend_tokens),
    ]
    jobs = [
        Job(name, b, t, _bind(factory, b, t))
        for name, factory, tokens in sections if factory is not None
        for b in batch_sizes
        for t in sorted(set(tokens))
    ]
    measured = measure_jobs(jobs, device=workload.device, warmup=warmup, repeats=repeats, rounds=rounds,
                            progress=progress)
    profile = Profile(
        model=workload.model,
        verify=measured.get("verify", []),
        draft_step=measured.get("draft_step", []),
        draft_extend=measured.get("draft_extend", []),
        mtp_draft_step=measured.get("mtp_draft_step", []),
        mtp_draft_extend=measured.get("mtp_draft_extend", []),
        allreduce=allreduce,
        overhead_ms=overhead_ms,
        context_tokens=workload.context_tokens,
        timer=timer_name(workload.device),
        warmup=warmup,
        repeats=repeats,
        environment=environment(workload.device),
    )
    if not calibrate:
        return profile
    console = Console(stderr=True)
    if progress and not console.is_terminal:
        print("profiling: timing the decoder's own cycles", file=sys.stderr, flush=True)
    with console.status("timing the decoder's own cycles", spinner="dots") if progress and console.is_terminal \
            else nullcontext():
        overheads = _fit_overheads(workload.cycles, CostTable.of(profile), batch_sizes) \
            if fit_drafter and workload.cycles is not None else []
        head_overheads = _fit_overheads(workload.mtp_cycles, CostTable.of(profile, mtp=True), [MTP_BATCH],
                                        trees=head_trees) if fit_head and workload.mtp_cycles is not None else []
    return replace(profile, overhead=overheads, mtp_overhead=head_overheads)


def _fit_overheads(cycles: CycleRunner, table: CostTable, batch_sizes: Sequence[int], *, trees: bool = True
                   ) -> list[Overhead]:
    """:func:`~draftlab.cost.overhead.fit_overhead` at every batch size; a batch size whose measured cycles
    are out of line with its neighbours' (:func:`draftlab.cost.outliers.out_of_line`) is fitted again, and
    the fit from the calmer cycles (lower total: load only adds time) kept."""
    def fit(b: int) -> tuple[Overhead, dict[str, float]]:
        seen: dict[str, float] = {}

        def run(batch: int, config: SpecConfig | None) -> CycleSample:
            sample = cycles(batch, config)
            seen["plain" if config is None else config.label] = sample.ms_per_cycle
            return sample
        return fit_overhead(b, run, table.passes_ms, table.decode_pass_ms(b), trees=trees), seen

    fits = {b: fit(b) for b in batch_sizes}
    curves: dict[str, dict[int, float]] = {}
    for b, (_, seen) in fits.items():
        for label, ms in seen.items():
            curves.setdefault(label, {})[b] = ms
    for b in sorted({b for _, b in out_of_line(curves)}):
        again = fit(b)
        if sum(again[1].values()) < sum(fits[b][1].values()):
            fits[b] = again
    return [fits[b][0] for b in batch_sizes]


def environment(device: torch.device | None = None) -> dict[str, object]:
    """Hardware and software versions, so a profile says where its numbers come from."""
    env: dict[str, object] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "draftlab": draftlab.__version__,
        "device": str(device) if device is not None else None,
        "cuda": torch.version.cuda,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if torch.cuda.is_available() else [],
    }
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    if torch.cuda.is_available() and torch.distributed.is_nccl_available():
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return env


def _bind(factory: PassFactory, b: int, t: int) -> Callable[[], Callable[[], object]]:
    return lambda: factory(b, t)
