"""``draftlab sweep``: launch, warm up, bench and stop the engine once per grid entry; one table and plot."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from draftlab.bench.grid import GRID_HELP, SweepEntry, parse_grid
from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one
from draftlab.cli.groups import grouped
from draftlab.cli.options import (
    DrafterIdOption,
    DryRunOption,
    HealthTimeoutOption,
    HostOption,
    PortOption,
    PromptsOption,
    SkipCheckOption,
    SyntheticAcceptanceOption,
    TargetIdOption,
    TimeoutOption,
    TpOption,
    request_options,
)
from draftlab.cli.output import emit_json, show
from draftlab.console import console, err_console
from draftlab.errors import DraftlabError
from draftlab.fsutil import local_inputs, refuse_overlap
from draftlab.report.sweep import render_sweep, render_sweep_plan

if TYPE_CHECKING:
    from draftlab.bench.sweep import SweepPlan, SweepResult

PHASES = {"launch": "starting the engine", "bench": "benchmarking", "done": "done", "failed": "failed"}


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@grouped
def sweep(
    ctx: typer.Context,
    engine: Annotated[str, typer.Option("--engine", help="sglang, vllm or draftlab (the reference server).")],
    target: TargetIdOption,
    grid: Annotated[str, typer.Option("--grid", help=GRID_HELP)],
    drafter: DrafterIdOption = None,
    prompts: PromptsOption = None,
    num_prompts: Annotated[Optional[int], typer.Option(
        "--num-prompts", callback=at_least_one, help="Measured requests per entry (prompts are cycled).")] = None,
    request: dict[str, Any] = request_options(warmup="Unmeasured requests per entry."),
    api: Annotated[Optional[str], typer.Option(
        "--api", help="openai-chat | openai | sglang (default: sglang; vLLM: openai).")] = None,
    tp: TpOption = 1,
    host: HostOption = "127.0.0.1",
    port: PortOption = None,
    max_running_requests: Annotated[Optional[int], typer.Option(
        "--max-running-requests", callback=at_least_one,
            help="Engine cap on every entry (default: max(48, largest batch)).")] = None,
    health_timeout: HealthTimeoutOption = 1800.0,
    timeout: TimeoutOption = 600.0,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="New folder for results (default: sweep-ENGINE-DATE-TIME).")] = None,
    skip_check: SkipCheckOption = False,
    schedule: Annotated[Optional[Path], typer.Option(
        "--schedule", help="Also bench this schedule (plan --schedule-out) at every batch of the grid; on draftlab "
        "serve every entry then batches requests.")] = None,
    predicted: Annotated[Optional[Path], typer.Option(
        "--predicted", help="A plan (draftlab plan ... --json > FILE): its tok/s beside each measurement.")] = None,
    synthetic_acceptance: SyntheticAcceptanceOption = None,
    dry_run: DryRunOption = False,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the summary (or, with --dry-run, the commands) as JSON.")] = False,
) -> int:
    """Bench every batch,steps,topk,draft-tokens entry on its own engine launch; extra engine args go after --."""
    from draftlab.acceptance.synthetic import parse_synthetic
    from draftlab.bench.sweep import SUMMARY_NAME, SweepOptions, plan_sweep

    synthetic = None if synthetic_acceptance is None else parse_synthetic(synthetic_acceptance)
    if out is not None and not dry_run:
        refuse_overlap(out, {**local_inputs(target=target, drafter=drafter), "--prompts": prompts,
                             "--schedule": schedule, "--predicted": predicted,
                             "--synthetic-acceptance": synthetic and synthetic.profile}, folder=True)
    loaded = predictions = None
    if schedule is not None:
        from draftlab.engines.schedule import load_schedule

        loaded = load_schedule(schedule)
    if predicted is not None:
        from draftlab.bench.predicted import load_predictions

        predictions = load_predictions(predicted)
    options = SweepOptions(
        engine=engine, target=target, drafter=drafter, grid=tuple(parse_grid(grid)), prompts=prompts,
        num_prompts=num_prompts, **request, api=api, tp=tp, host=host, port=port, max_running_requests=max_running_requests,
        health_timeout_s=health_timeout, request_timeout_s=timeout, extra_args=tuple(ctx.args), skip_check=skip_check,
        schedule=loaded, predicted=predictions,
        synthetic=synthetic,
    )
    plan = plan_sweep(options)
    if dry_run:
        _show_plan(plan, json_out)
        return 0
    folder = out or Path(f"sweep-{engine}-{time.strftime('%Y%m%d-%H%M%S')}")
    result = _run(plan, folder, quiet=json_out)
    show(result, json_out, render_sweep)
    summary = Path(result.out_dir) / SUMMARY_NAME
    if result.interrupted:
        err_console.print(f"draftlab: interrupted; the entries that ran are in {summary}")
        return 130
    if result.all_failed:
        raise DraftlabError(f"every sweep entry failed, first: {result.rows[0].error} (summary: {summary})")
    return 0


def _run(plan: SweepPlan, folder: Path, *, quiet: bool) -> SweepResult:
    from draftlab.bench.sweep import run_sweep

    total = len(plan.entries)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True, disable=quiet) as progress:
        entries = progress.add_task("entries", total=total)
        requests = progress.add_task("requests", total=None, visible=False)

        def on_event(index: int, entry: SweepEntry, phase: str) -> None:
            progress.update(entries, description=f"{entry.label} at batch {entry.batch}: {PHASES[phase]}")
            if phase == "bench":
                progress.reset(requests, total=plan.options.num_prompts, visible=True)
            if phase in ("done", "failed"):
                progress.update(requests, visible=False)
                progress.advance(entries)
                if not quiet:
                    err_console.print(f"[{index}/{total}] {entry.label} at batch {entry.batch}: {PHASES[phase]}")

        return run_sweep(plan, folder, on_event=on_event, on_request=lambda _r: progress.advance(requests))


def _show_plan(plan: SweepPlan, json_out: bool) -> None:
    if json_out:
        synthetic = plan.options.synthetic
        emit_json({"api": plan.api, "max_running_requests": plan.max_running_requests, "notes": plan.notes,
                   "synthetic_acceptance": None if synthetic is None else synthetic.record(),
                   "entries": [{**_entry_json(p.entry), "argv": p.command.argv, "env": p.command.env,
                                "shell": p.command.shell, "base_url": p.command.base_url} for p in plan.entries]})
        return
    render_sweep_plan(plan, console, err_console)


def _entry_json(e: SweepEntry) -> dict[str, int | str]:
    return {"config": e.label, "batch": e.batch, "steps": e.steps, "topk": e.topk, "num_draft_tokens": e.num_draft_tokens}
