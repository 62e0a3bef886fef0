"""The measurement harness: time prepared callables with warm-up, report medians and spread.

Each measurement builds its inputs first (outside the timed region), runs a few warm-up calls,
then times ``repeats`` calls one by one by the wall clock, synchronizing the device before and after
each call. Wall time, not CUDA events: the reference runtime's passes are bound by the host that
launches them, and what a cycle costs is how long the decoder waits for each pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from draftlab.cost.measurement import Measurement, Timing
from draftlab.errors import DraftlabError
from draftlab.models.devices import synchronize


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
