"""``draftlab launch sglang|vllm|draftlab``: the exact engine command, checked, run and stopped cleanly."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.deployed import InstalledVersionOption
from draftlab.cli.options import (
    DrafterIdOption,
    DryRunOption,
    HealthTimeoutOption,
    HostOption,
    NumDraftTokensOption,
    PortOption,
    SkipCheckOption,
    StepsOption,
    SyntheticAcceptanceOption,
    TargetIdOption,
    TopkOption,
    TpOption,
)
from draftlab.cli.output import emit_json
from draftlab.console import console, err_console
from draftlab.errors import DraftlabError
from draftlab.fsutil import local_inputs, refuse_overlap
from draftlab.report.launch import render_launch


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def launch(
    ctx: typer.Context,
    engine: Annotated[str, typer.Argument(help="sglang, vllm or draftlab (the reference server).")],
    target: TargetIdOption,
    drafter: DrafterIdOption = None,
    steps: StepsOption = None,
    topk: TopkOption = None,
    num_draft_tokens: NumDraftTokensOption = None,
    tp: TpOption = 1,
    host: HostOption = "127.0.0.1",
    port: PortOption = None,
    max_running_requests: Annotated[int, typer.Option(
        "--max-running-requests", help="Both arms (SGLang's EAGLE cap).")] = 48,
    chunked_prefill_size: Annotated[Optional[int], typer.Option("--chunked-prefill-size")] = None,
    health_timeout: HealthTimeoutOption = 1800.0,
    log_file: Annotated[Optional[Path], typer.Option("--log-file", help="Default: draftlab-ENGINE-PORT.log.")] = None,
    skip_check: SkipCheckOption = False,
    engine_version: InstalledVersionOption = None,
    schedule: Annotated[Optional[Path], typer.Option(
        "--schedule", help="Draft length per batch size: a file written by draftlab plan --schedule ENGINE "
        "--schedule-out FILE, passed the way that release reads it.")] = None,
    synthetic_acceptance: SyntheticAcceptanceOption = None,
    dry_run: DryRunOption = False,
    json_out: Annotated[bool, typer.Option("--json", help="With --dry-run: the command as JSON.")] = False,
) -> int:
    """Start an engine server with EAGLE-3, the target's own MTP layers (--drafter mtp) or the baseline; extra engine
    args go after --."""
    from draftlab.acceptance.synthetic import parse_synthetic
    from draftlab.compat.prelaunch import check_before_launch
    from draftlab.engines.launch import EngineProcess, LaunchRequest, engine_command, local_architecture

    if drafter == "mtp" and Path("mtp").is_dir():
        raise DraftlabError(f"--drafter mtp names the target's own MTP layers, but ./mtp is also a folder here; "
                            f"give the folder as {Path('mtp').resolve()} or run from elsewhere")
    loaded = None
    if schedule is not None:
        from draftlab.engines.schedule import check_for_engine, load_schedule

        loaded = load_schedule(schedule)
        if engine in ("sglang", "vllm"):
            check_for_engine(loaded, engine, engine_version)
    synthetic = None if synthetic_acceptance is None else parse_synthetic(synthetic_acceptance)
    request = LaunchRequest(
        engine=engine, target=target, drafter=drafter, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens,
        tp=tp, host=host, port=port, max_running_requests=max_running_requests,
        chunked_prefill_size=chunked_prefill_size, extra_args=tuple(ctx.args),
        target_architecture=local_architecture(target), synthetic=synthetic, engine_version=engine_version,
        schedule=loaded,
    )
    if engine_version is not None:
        from draftlab.engines.releases import release

        if engine not in ("sglang", "vllm"):
            raise DraftlabError("--engine-version names an SGLang or vLLM release; draftlab's own server has none")
        release(engine, engine_version)  # an unknown release is refused even with --skip-check
    too_short, check_notes = ((False, ["check skipped (--skip-check)"]) if skip_check
                              else check_before_launch(request, engine_version))
    command = engine_command(request, context_too_short=too_short)
    command = dataclasses.replace(command, notes=check_notes + command.notes)
    if dry_run:
        if json_out:
            emit_json({**dataclasses.asdict(command), "shell": command.shell})
        else:
            render_launch(command, console, err_console)
        return 0
    if json_out:
        raise DraftlabError("--json only goes with --dry-run (a running server prints its log, not JSON)")
    log = log_file or Path(f"draftlab-{command.engine}-{command.port}.log")
    profile = synthetic.profile if synthetic is not None else None
    refuse_overlap(log, {**local_inputs(target=target, drafter=drafter, synthetic_acceptance=profile),
                         "--schedule": schedule})
    render_launch(command, console, err_console)
    with EngineProcess(command, log) as proc:
        proc.start()
        with err_console.status(f"waiting for {command.base_url}/health (log: {log})"):
            proc.wait_healthy(health_timeout)
        console.print(f"[green]ready[/green] at {command.base_url} (log: {log}); Ctrl-C stops it")
        code = proc.process.wait()
        raise DraftlabError(f"{command.engine} exited with code {code}: {proc.last_log_line()} (log: {log})")
