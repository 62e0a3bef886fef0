"""The measurement harness: time prepared callables with warm-up, report medians and spread.

Each measurement builds its inputs first (outside the timed region), runs a few warm-up calls,
then times calls one by one by the wall clock, synchronizing the device before and after each call;
a profile's points are measured in interleaved rounds (:func:`measure_jobs`). Wall time, not CUDA events: the reference runtime's passes are bound by the host that
launches them, and what a cycle costs is how long the decoder waits for each pass.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from draftlab.cost.measurement import Measurement, Timing
from draftlab.cost.outliers import out_of_line
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
    return Timing.of(time_samples(fn, device=device, warmup=warmup, repeats=repeats))


def time_samples(fn: Callable[[], object], *, device: torch.device, warmup: int = 3, repeats: int = 10) -> list[float]:
    """The milliseconds of ``repeats`` calls of ``fn``, one by one, after ``warmup`` untimed calls."""
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
    return samples


def measure_jobs(
    jobs: Sequence[Job],
    *,
    device: torch.device,
    warmup: int = 3,
    repeats: int = 10,
    rounds: int = 3,
    progress: bool = True,
) -> dict[str, list[Measurement]]:
    """Measure every job (progress on stderr: a bar on a terminal, else a line per round); results grouped by
    section, in job order.

    The ``repeats`` timed calls of a job are split over ``rounds`` passes through the whole job list
    (each pass prepares the job afresh and warms it up), and every other pass runs the list backwards:
    a burst of load from another process then spreads over many points instead of spoiling one, and
    each point is the median of its calls from every round. A batch size whose points stand out of
    line with both neighbouring batch sizes (:func:`draftlab.cost.outliers.out_of_line`) is
    measured once more, and of the two measurements of each of its points the one with the lower
    median is kept (load from elsewhere only adds time)."""
    if rounds < 1:
        raise DraftlabError(f"need rounds >= 1, got {rounds}")
    samples: list[list[float]] = [[] for _ in jobs]
    console = Console(stderr=True)
    lines = progress and not console.is_terminal  # a log file gets a line per round instead of a bar
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(), console=console, disable=not progress or lines, transient=True,
    ) as bar:
        task = bar.add_task("profiling", total=len(jobs) * min(rounds, repeats))
        _sample(jobs, range(len(jobs)), samples, device, warmup, repeats, rounds, bar, task, lines)
        curves: dict[tuple[str, int], dict[int, float]] = {}
        for job, s in zip(jobs, samples):
            curves.setdefault((job.section, job.tokens), {})[job.batch_size] = statistics.median(s)
        again = {(section, b) for (section, _), b in out_of_line(curves)}
        redo = [i for i, job in enumerate(jobs) if (job.section, job.batch_size) in again]
        if redo:
            bar.update(task, total=len(jobs) * min(rounds, repeats) + len(redo) * min(rounds, repeats))
            again_samples: list[list[float]] = [[] for _ in jobs]
            _sample(jobs, redo, again_samples, device, warmup, repeats, rounds, bar, task, lines)
            for i in redo:  # load from elsewhere only adds time: keep the calmer measurement
                if statistics.median(again_samples[i]) < statistics.median(samples[i]):
                    samples[i] = again_samples[i]
    out: dict[str, list[Measurement]] = {}
    for m in _summaries(jobs, samples):
        out.setdefault(m[0], []).append(m[1])
    return out


def _sample(jobs: Sequence[Job], which: Sequence[int], samples: list[list[float]], device: torch.device,
            warmup: int, repeats: int, rounds: int, bar: Progress, task: TaskID, lines: bool = False) -> None:
    """Add ``repeats`` timed calls of each job in ``which`` to ``samples``, over interleaved rounds (``lines``:
    say each finished round on stderr)."""
    rounds = min(rounds, repeats)
    for r in range(rounds):
        calls = repeats // rounds + (1 if r < repeats % rounds else 0)
        for i in (which if r % 2 == 0 else list(reversed(which))):
            job = jobs[i]
            bar.update(task, description=f"{job.section} B={job.batch_size} t={job.tokens} (round {r + 1}/{rounds})")
            with torch.inference_mode():
                fn = job.prepare()
                samples[i] += time_samples(fn, device=device, warmup=warmup, repeats=calls)
            bar.advance(task)
        if lines:
            print(f"profiling: round {r + 1} of {rounds} over {len(which)} passes measured", file=sys.stderr,
                  flush=True)


def _summaries(jobs: Sequence[Job], samples: list[list[float]]) -> list[tuple[str, Measurement]]:
    return [(job.section, Measurement.of(job.batch_size, job.tokens, Timing.of(s))) for job, s in zip(jobs, samples)]
