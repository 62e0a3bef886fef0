"""``draftlab launch sglang|vllm|draftlab``: the exact engine command, checked, run and stopped cleanly."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from draftlab.cli.app import app
from draftlab.cli.common import console, emit_json, err_console
from draftlab.engines.launch import (
    EngineCommand,
    EngineProcess,
    LaunchRequest,
    check_before_launch,
    engine_command,
    local_architecture,
)
from draftlab.errors import DraftlabError


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def launch(
    ctx: typer.Context,
    engine: str = typer.Argument(..., help="sglang, vllm or draftlab (the reference server)"),
    target: str = typer.Option(..., "--target", help="Target model folder or hub id"),
    drafter: str = typer.Option(None, "--drafter", help="EAGLE-3 drafter folder or hub id (omit: baseline)"),
    steps: int = typer.Option(None, "--steps"),
    topk: int = typer.Option(None, "--topk"),
    num_draft_tokens: int = typer.Option(None, "--num-draft-tokens"),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel size"),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(None, "--port", help="Default: SGLang 30000, vLLM 8000"),
    max_running_requests: int = typer.Option(48, "--max-running-requests", help="Both arms (SGLang's EAGLE cap)"),
    chunked_prefill_size: int = typer.Option(None, "--chunked-prefill-size"),
    health_timeout: float = typer.Option(1800.0, "--health-timeout", help="Seconds to wait for /health"),
    log_file: Path = typer.Option(None, "--log-file", help="Default: draftlab-ENGINE-PORT.log"),
    skip_check: bool = typer.Option(False, "--skip-check", help="Launch without draftlab check"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the command and environment only"),
    json_out: bool = typer.Option(False, "--json", help="With --dry-run: the command as JSON"),
) -> int:
    """Start an engine server with EAGLE-3 (or the baseline); extra engine args go after --."""
    request = LaunchRequest(
        engine=engine, target=target, drafter=drafter, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens,
        tp=tp, host=host, port=port, max_running_requests=max_running_requests,
        chunked_prefill_size=chunked_prefill_size, extra_args=tuple(ctx.args),
        target_architecture=local_architecture(target),
    )
    too_short, check_notes = (False, ["check skipped (--skip-check)"]) if skip_check else check_before_launch(request)
    command = engine_command(request, context_too_short=too_short)
    command = dataclasses.replace(command, notes=check_notes + command.notes)
    if dry_run:
        if json_out:
            emit_json({**dataclasses.asdict(command), "shell": command.shell})
        else:
            _render(command)
        return 0
    if json_out:
        raise DraftlabError("--json only goes with --dry-run (a running server prints its log, not JSON)")
    _render(command)
    log = log_file or Path(f"draftlab-{command.engine}-{command.port}.log")
    with EngineProcess(command, log) as proc:
        proc.start()
        with err_console.status(f"waiting for {command.base_url}/health (log: {log})"):
            proc.wait_healthy(health_timeout)
        console.print(f"[green]ready[/green] at {command.base_url} (log: {log}); Ctrl-C stops it")
        code = proc.process.wait()
        raise DraftlabError(f"{command.engine} exited with code {code}: {proc.last_log_line()} (log: {log})")


def _render(command: EngineCommand) -> None:
    for key, value in command.env.items():
        console.print(f"[bold]env[/bold] {key}={value}")
    console.print(command.shell, soft_wrap=True, markup=False)
    for note in command.notes:
        err_console.print(f"  note: {note}", markup=False, soft_wrap=True)
