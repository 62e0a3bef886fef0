"""``draftlab regenerate``: the target's own responses for a dataset's prompts (one JSONL out, resumable)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one, non_negative
from draftlab.cli.common import main_process
from draftlab.cli.deployed import EngineChoice, engine_choice
from draftlab.cli.groups import grouped
from draftlab.cli.output import JsonOption, emit_json
from draftlab.cli.placement import Placement, ThreadsOption, placement
from draftlab.console import console
from draftlab.documents import to_jsonable


@app.command("regenerate")
@grouped
def regenerate_command(
    data: Annotated[Path, typer.Option("--data", help="JSONL conversations (messages or conversations).")],
    out: Annotated[Path, typer.Option("--out", help="New JSONL file: each row with the target's response.")],
    target: Annotated[Optional[Path], typer.Option("--target", help="Run this target here (batched).")] = None,
    base_url: Annotated[Optional[str], typer.Option(
        "--base-url", help="Or ask an OpenAI-compatible server (SGLang, vLLM, draftlab serve).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Server model name (default: its first).")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", callback=at_least_one,
        help="Server requests in flight.")] = 8,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", callback=at_least_one,
        help="Tokens per response at most.")] = 512,
    temperature: Annotated[float, typer.Option("--temperature", callback=non_negative, help="0 is greedy.")] = 0.0,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed (runtime, temperature > 0).")] = 0,
    batch_size: Annotated[int, typer.Option("--batch-size", callback=at_least_one,
        help="Prompts per decoding batch (runtime).")] = 8,
    resume: Annotated[bool, typer.Option("--resume", help="Finish an interrupted run.")] = False,
    where: Placement = placement(dtype="float32"),
    asked: EngineChoice = engine_choice(window=False),
    json_out: JsonOption = False,
    threads: ThreadsOption = None,
) -> None:
    """Replace each conversation's last assistant turn with the target's own response."""
    from draftlab.train.regenerate import regenerate

    result = regenerate(data, out, target=target, base_url=base_url, model=model, concurrency=concurrency,
                        max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, batch_size=batch_size,
                        resume=resume, **where.loading())
    if not main_process():
        return
    if json_out:  # no drafter: the engine asked for, nothing captured
        emit_json({**to_jsonable(result), **asked.describe()})
    else:
        console.print(f"[bold]{result.out}[/]: {result.rows} rows; {result.generated} responses generated "
                      f"({result.source}), {result.resumed} from the earlier run.")
