"""A sweep: for every grid entry, launch the engine, warm up, bench, stop; then one summary and plot.

"Batch" in a grid entry is the bench client's concurrency: how many requests are kept in flight.
The engine's own cap on running requests is one value for every entry (``max(48, largest batch)``
unless given: SGLang's EAGLE default of 48 applied to the baseline too, raised so that no entry's
batch queues inside the engine), so entries differ only in batch and speculation flags.

Each entry gets its own engine process, launched once with exactly its flags and stopped before
the next starts; a server is never reused across entries. An entry whose engine fails (exits,
never becomes healthy, port taken) is recorded with its error and log path and the sweep goes on.
``sweep.json`` is rewritten (atomically) after every entry, so a stopped sweep still leaves a valid
summary of what ran; Ctrl-C stops the running engine and ends the sweep there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftlab.acceptance.synthetic import SyntheticAcceptance
from draftlab.bench.client import BenchConfig, RequestRecord
from draftlab.bench.grid import SweepEntry
from draftlab.bench.predicted import Predictions
from draftlab.bench.result import BenchResult
from draftlab.bench.run import check_bench_config, run_bench
from draftlab.bench.workload import Prompt, load_prompts
from draftlab.compat.prelaunch import check_before_launch
from draftlab.documents import document
from draftlab.engines.launch import (
    BENCH_API,
    REFERENCE,
    SPEC_MAX_RUNNING_REQUESTS,
    EngineCommand,
    EngineProcess,
    LaunchRequest,
    check_installed,
    check_port_free,
    engine_command,
    local_architecture,
)
from draftlab.engines.schedule import LoadedSchedule, check_for_engine
from draftlab.errors import DraftlabError
from draftlab.fsutil import write_json_atomic

SUMMARY_NAME = "sweep.json"
PLOT_NAME = "sweep.png"
INTERRUPTED = "interrupted"  # the error of the entry Ctrl-C stopped


@dataclass(frozen=True)
class SweepOptions:
    """Everything a sweep needs; the bench settings are the same for every entry."""

    engine: str  # sglang, vllm or draftlab (the reference server)
    target: str
    drafter: str | None
    grid: tuple[SweepEntry, ...]
    prompts: Path | None = None  # needed to run, not to plan
    num_prompts: int | None = None
    max_tokens: int = 128
    ignore_eos: bool = False
    temperature: float = 0.0
    warmup: int = 1
    api: str | None = None  # None: the engine's exact-accept-length API (engines.launch.BENCH_API)
    tp: int = 1
    host: str = "127.0.0.1"
    port: int | None = None
    max_running_requests: int | None = None  # None: max(48, largest batch), on every entry
    health_timeout_s: float = 1800.0
    request_timeout_s: float = 600.0
    extra_args: tuple[str, ...] = ()
    skip_check: bool = False
    schedule: LoadedSchedule | None = None  # adds a "schedule" entry at every batch of the grid
    predicted: Predictions | None = None  # a plan's tok/s, shown beside each entry's measurement
    synthetic: SyntheticAcceptance | None = None  # every speculative entry forced to this acceptance


@dataclass(frozen=True)
class PlannedEntry:
    entry: SweepEntry
    command: EngineCommand


@dataclass(frozen=True)
class SweepPlan:
    """The exact command of every entry, built (and so checked) before anything is launched."""

    options: SweepOptions
    api: str
    max_running_requests: int
    entries: list[PlannedEntry]
    notes: list[str]


@dataclass
class SweepRow:
    """One entry's outcome. Files are relative to the sweep's folder; ``error`` is None when it ran."""

    batch: int
    steps: int
    topk: int
    num_draft_tokens: int
    config: str  # "baseline" or steps/topk/num_draft_tokens
    accept_length: float | None = None
    output_throughput: float | None = None
    ttft_p50_ms: float | None = None
    tpot_p50_ms: float | None = None
    speedup: float | None = None  # over the baseline at the same batch; None without one
    predicted_throughput: float | None = None  # the plan's tok/s for this entry (--predicted)
    prediction_error: float | None = None  # measured / predicted - 1
    completed: int = 0
    failed: int = 0
    result_file: str | None = None
    log_file: str | None = None
    error: str | None = None
    synthetic_accept_length: float | None = None  # the accept length the entry was forced to (synthetic runs)


@dataclass
class SweepResult:
    engine: str
    target: str
    drafter: str | None
    api: str
    max_running_requests: int
    out_dir: str
    rows: list[SweepRow]
    plot: str | None = None  # file name in out_dir; None until at least one entry ran
    complete: bool = False  # every entry was attempted
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    synthetic_acceptance: dict[str, Any] | None = None  # what was requested, when the run was synthetic

    @property
    def all_failed(self) -> bool:
        return bool(self.rows) and all(r.error is not None for r in self.rows)


def plan_sweep(options: SweepOptions) -> SweepPlan:
    """Check the pair once and build every entry's command; DraftlabError before any launch."""
    grid = options.grid
    if not grid:
        raise DraftlabError("the sweep grid is empty; give at least one batch,steps,topk,num_draft_tokens entry")
    notes: list[str] = []
    if options.schedule is not None:
        if options.synthetic is not None:
            raise DraftlabError("--schedule and --synthetic-acceptance do not go together (the batching server "
                                "does not force acceptance); run them as two sweeps")
        grid, schedule_notes = _with_schedule(options)
        notes += schedule_notes
    specs = [e for e in grid if not e.is_baseline]
    if specs and options.drafter is None:
        raise DraftlabError(f"--grid has speculative entries ({specs[0].label}) but no --drafter; give --drafter "
                            "or keep only baseline entries (B,0,0,0)")
    largest = max(e.batch for e in grid)
    cap = options.max_running_requests or max(SPEC_MAX_RUNNING_REQUESTS, largest)
    if cap < largest:
        notes.append(f"--max-running-requests {cap} is below batch {largest}: the engine queues the rest")
    architecture = local_architecture(options.target)
    context_too_short = False
    if specs:
        if options.skip_check:
            notes.append("check skipped (--skip-check)")
        else:
            first = next(e for e in specs if not e.schedule) if any(not e.schedule for e in specs) else specs[0]
            context_too_short, check_notes = check_before_launch(_request(options, first, cap, architecture))
            notes += check_notes
    entries = []
    for position, entry in enumerate(grid, start=1):
        try:
            command = engine_command(_request(options, entry, cap, architecture), context_too_short=context_too_short)
        except DraftlabError as exc:
            raise DraftlabError(f"--grid entry {position} {entry.text!r} for {options.engine}: {exc}") from None
        entries.append(PlannedEntry(entry, command))
    for note in (n for p in entries for n in p.command.notes):
        if note not in notes:
            notes.append(note)
    return SweepPlan(options, options.api or BENCH_API[options.engine], cap, entries, notes)


def _request(options: SweepOptions, entry: SweepEntry, cap: int, architecture: str | None) -> LaunchRequest:
    spec = not entry.is_baseline
    fixed = spec and not entry.schedule
    extra = options.extra_args
    if options.schedule is not None and options.engine == REFERENCE and "--max-batch" not in extra:
        extra = ("--max-batch", str(cap), *extra)  # every arm batches like the schedule's
    return LaunchRequest(
        engine=options.engine, target=options.target, drafter=options.drafter if spec else None,
        steps=entry.steps if fixed else None, topk=entry.topk if fixed else None,
        num_draft_tokens=entry.num_draft_tokens if fixed else None, tp=options.tp, host=options.host,
        port=options.port, max_running_requests=cap, extra_args=extra,
        target_architecture=architecture, schedule=options.schedule if entry.schedule else None,
        synthetic=options.synthetic if spec else None,
    )


def _with_schedule(options: SweepOptions) -> tuple[tuple[SweepEntry, ...], list[str]]:
    """The grid plus a schedule entry at each of its batches; refuses a schedule the engine cannot read."""
    schedule = options.schedule
    assert schedule is not None
    if options.engine in ("sglang", "vllm"):
        check_for_engine(schedule, options.engine, None)
    top = schedule.max_draft_length
    batches = dict.fromkeys(e.batch for e in options.grid)
    added = tuple(SweepEntry(b, top, 1, top + 1, schedule=True) for b in batches)
    notes = [f"schedule entries at batch {', '.join(map(str, batches))}: draft length per batch size from "
             f"{schedule.path}"]
    if options.engine == REFERENCE:
        notes.append("draftlab serve batches requests on every entry (--max-batch): fixed K, baseline and "
                     "schedule alike")
    return options.grid + added, notes


def bench_config(plan: SweepPlan, planned: PlannedEntry) -> BenchConfig:
    """The bench run of one entry: batch = concurrency, labelled by config (so bench compare reads it too)."""
    o = plan.options
    return BenchConfig(
        base_url=planned.command.base_url, api=plan.api, num_prompts=o.num_prompts, concurrency=planned.entry.batch,
        max_tokens=o.max_tokens, ignore_eos=o.ignore_eos, temperature=o.temperature, warmup=o.warmup,
        timeout_s=o.request_timeout_s, label=planned.entry.label,
        synthetic_acceptance=_synthetic_record(o, planned.entry),
    )


def _synthetic_record(options: SweepOptions, entry: SweepEntry) -> dict[str, Any] | None:
    """What an entry's bench result records about its forced acceptance (None: a real or a baseline run)."""
    if options.synthetic is None or entry.is_baseline:
        return None
    return options.synthetic.record(entry.steps)


# (entry index, entry, phase: "launch" | "bench" | "done" | "failed")
SweepEvent = Callable[[int, SweepEntry, str], None]


def run_sweep(
    plan: SweepPlan, out_dir: str | Path, *, on_event: SweepEvent | None = None,
    on_request: Callable[[RequestRecord], None] | None = None,
) -> SweepResult:
    """Run every planned entry in turn into ``out_dir`` (new or empty); returns the summary."""
    if plan.options.prompts is None:
        raise DraftlabError("a sweep needs --prompts FILE (JSONL rows with prompt, messages or input_ids)")
    prompts = load_prompts(plan.options.prompts)
    configs = [bench_config(plan, p) for p in plan.entries]
    for config in configs:
        check_bench_config(config, prompts)
    first = plan.entries[0].command
    check_installed(first)
    check_port_free(first.host, first.port)
    out = _new_folder(Path(out_dir))
    o = plan.options
    result = SweepResult(o.engine, o.target, o.drafter, plan.api, plan.max_running_requests, str(out.resolve()),
                         [], notes=list(plan.notes),
                         synthetic_acceptance=None if o.synthetic is None else o.synthetic.record())
    notify = on_event or (lambda *_: None)
    try:
        for index, (planned, config) in enumerate(zip(plan.entries, configs), start=1):
            row = _run_entry(index, planned, config, prompts, out, o.health_timeout_s, notify, on_request)
            _predict(row, planned.entry, o)
            if config.synthetic_acceptance is not None:
                row.synthetic_accept_length = config.synthetic_acceptance["accept_length"]
            result.rows.append(row)
            _write_summary(result, out, plot=False)
            if row.error == INTERRUPTED:
                result.interrupted = True
                break
        else:
            result.complete = True
    except KeyboardInterrupt:  # between entries or while writing the summary: no engine runs then
        result.interrupted = True
    _write_summary(result, out, plot=True)
    return result


def _run_entry(
    index: int, planned: PlannedEntry, config: BenchConfig, prompts: list[Prompt], out: Path, health_timeout_s: float,
    notify: SweepEvent, on_request: Callable[[RequestRecord], None] | None,
) -> SweepRow:
    entry = planned.entry
    stem = f"{index:02d}-{entry.slug}"
    row = SweepRow(entry.batch, entry.steps, entry.topk, entry.num_draft_tokens, entry.label,
                   log_file=f"{stem}.log")
    try:
        with EngineProcess(planned.command, out / row.log_file) as proc:
            notify(index, entry, "launch")
            proc.start()
            proc.wait_healthy(health_timeout_s)
            notify(index, entry, "bench")
            bench = run_bench(config, prompts, on_done=on_request)
    except DraftlabError as exc:
        row.error = str(exc)
        notify(index, entry, "failed")
        return row
    except KeyboardInterrupt:  # the engine is already stopped (EngineProcess.__exit__)
        row.error = INTERRUPTED
        return row
    row.result_file = f"{stem}.json"
    write_json_atomic(out / row.result_file, document(bench))
    _fill(row, bench, out / row.log_file)
    notify(index, entry, "failed" if row.error else "done")
    return row


def _fill(row: SweepRow, bench: BenchResult, log: Path) -> None:
    row.accept_length = bench.accept_length
    row.output_throughput = bench.output_throughput
    row.ttft_p50_ms = bench.ttft_ms.get("p50")
    row.tpot_p50_ms = bench.tpot_ms.get("p50")
    row.completed, row.failed = bench.completed, bench.failed
    if bench.config.get("interrupted"):
        row.error = INTERRUPTED
    elif bench.completed == 0:
        example = bench.errors[0]["example"] if bench.errors else "no request completed"
        row.error = f"no request completed: {example} (engine log: {log})"


def _predict(row: SweepRow, entry: SweepEntry, options: SweepOptions) -> None:
    """The plan's tok/s for this entry (its schedule's K at this batch for a schedule entry; on the batching
    reference server, the plan's served prediction where it has one), and the error."""
    if options.predicted is None:
        return
    table = options.predicted
    if options.engine == REFERENCE and options.schedule is not None and table.served is not None:
        table = table.served  # the batching reference server, as plan --served predicts it
    if entry.schedule and options.schedule is not None:
        row.predicted_throughput = table.chain(entry.batch, options.schedule.draft_length(entry.batch))
    else:
        row.predicted_throughput = table.at(entry.batch, entry.steps, entry.topk, entry.num_draft_tokens)
    if row.predicted_throughput and row.output_throughput is not None and row.error is None:
        row.prediction_error = row.output_throughput / row.predicted_throughput - 1


def with_speedups(rows: list[SweepRow]) -> None:
    """Speedup = output throughput / the baseline's at the same batch (baseline: 1.0; None without one)."""
    base = {r.batch: r.output_throughput for r in rows if r.steps == 0 and r.error is None and r.output_throughput}
    for r in rows:
        ref = base.get(r.batch)
        r.speedup = r.output_throughput / ref if ref and r.error is None and r.output_throughput is not None else None


def _write_summary(result: SweepResult, out: Path, *, plot: bool) -> None:
    """sweep.json (after every entry, so a stopped sweep leaves one); the plot once, at the end."""
    from draftlab.bench.sweep_plot import plot_sweep

    with_speedups(result.rows)
    if plot and any(r.error is None for r in result.rows):
        plot_sweep(result.rows, out / PLOT_NAME)
        result.plot = PLOT_NAME
    write_json_atomic(out / SUMMARY_NAME, document(result))


def _new_folder(out: Path) -> Path:
    """Create the sweep's folder; an existing non-empty one is refused (never mixed with other runs)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DraftlabError("already exists and is not an empty folder; choose a new --out", path=out)
    out.mkdir(parents=True, exist_ok=True)
    return out
