"""The measurement harness: time prepared callables with warm-up, report medians and spread.

Each measurement builds its inputs first (outside the timed region), runs a few warm-up calls,
then times ``repeats`` calls one by one by the wall clock, synchronizing the device before and after
each call. Wall time, not CUDA events: the reference runtime's passes are bound by the host that
launches them, and what a cycle costs is how long the decoder waits for each pass.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from draftlab.errors import DraftlabError
from draftlab.models.devices import synchronize


@dataclass(frozen=True)
class Timing:
    """Summary of repeated timings of one callable, in milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    repeats: int

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> Timing:
        if not samples_ms:
            raise ValueError("no timing samples")
        ordered = sorted(samples_ms)
        return cls(
            median_ms=statistics.median(ordered),
            p10_ms=_quantile(ordered, 0.1),
            p90_ms=_quantile(ordered, 0.9),
            min_ms=ordered[0],
            max_ms=ordered[-1],
            repeats=len(ordered),
        )


@dataclass(frozen=True)
class Measurement:
    """One measured point of a cost curve: ``tokens`` per sequence at ``batch_size``."""

    batch_size: int
    tokens: int
    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    repeats: int

    @classmethod
    def of(cls, batch_size: int, tokens: int, timing: Timing) -> Measurement:
        return cls(batch_size, tokens, **timing.__dict__)


@dataclass(frozen=True)
class Job:
    """A point to measure: ``prepare()`` builds the inputs and returns the callable to time."""

    section: str
    batch_size: int
    tokens: int
    prepare: Callable[[], Callable[[], object]]


def timer_name(device: torch.device) -> str:
    return "perf_counter_synchronized" if device.type == "cuda" else "perf_counter"


def time_callable(
    fn: Callable[[], object], *, device: torch.device, warmup: int = 3, repeats: int = 10
) -> Timing:
    """Time ``fn`` ``repeats`` times after ``warmup`` untimed calls."""
    if warmup < 0 or repeats < 1:
        raise DraftlabError(f"need warmup >= 0 and repeats >= 1, got {warmup} and {repeats}")
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        samples.append((time.perf_counter() - start) * 1000.0)
    return Timing.of(samples)


def measure_jobs(
    jobs: Sequence[Job],
    *,
    device: torch.device,
    warmup: int = 3,
    repeats: int = 10,
    progress: bool = True,
) -> dict[str, list[Measurement]]:
    """Measure every job (progress bar on stderr); results grouped by section, in job order."""
    out: dict[str, list[Measurement]] = {}
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(), console=Console(stderr=True), disable=not progress, transient=True,
    ) as bar:
        task = bar.add_task("profiling", total=len(jobs))
        for job in jobs:
            bar.update(task, description=f"{job.section} B={job.batch_size} t={job.tokens}")
            with torch.inference_mode():
                fn = job.prepare()
                timing = time_callable(fn, device=device, warmup=warmup, repeats=repeats)
            out.setdefault(job.section, []).append(
                Measurement.of(job.batch_size, job.tokens, timing)
            )
            bar.advance(task)
    return out


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted samples (numpy's default method)."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
