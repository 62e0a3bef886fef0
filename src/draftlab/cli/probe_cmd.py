"""``draftlab probe``: exact greedy accept lengths from one target pass, no serving engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from draftlab.cli.app import app
from draftlab.cli.common import (
    DeviceMapOption, DeviceOption, DtypeOption, EngineOption, JsonOption, NumDraftTokensOption, SamplingSeedOption,
    StepsOption, TargetOption, TopkOption, console, emit_json,
)
from draftlab.probe.probe import ProbeResult, probe


@app.command("probe")
def probe_command(
    target: TargetOption,
    drafter: Annotated[Path, typer.Option("--drafter", help="EAGLE-3 drafter folder.")],
    prompts: Annotated[Optional[Path], typer.Option(
        "--prompts", help="JSONL: one of input_ids, prompt or messages a line (plus response_ids with "
                          "--responses given).")] = None,
    features: Annotated[Optional[Path], typer.Option(
        "--features", help="Hidden states captured by an engine (SpecForge data_*.ckpt, speculators data_*.pt or "
                           "hs_*.safetensors) instead of running the target; --target then gives only its config, "
                           "embedding and lm_head.")] = None,
    steps: StepsOption = None,
    topk: TopkOption = None,
    num_draft_tokens: NumDraftTokensOption = None,
    max_new_tokens: Annotated[int, typer.Option(
        "--max-new-tokens", help="Continuation tokens per prompt (a given response is cut to this).")] = 128,
    responses: Annotated[str, typer.Option(
        "--responses", help="generate: the target's greedy continuation; given: response_ids from the file.")
    ] = "generate",
    temperature: Annotated[float, typer.Option(
        "--temperature", help="0: exact greedy accept lengths. > 0 (chains): expected acceptance, an estimate.")] = 0.0,
    seed: SamplingSeedOption = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Sequences per target/drafter pass.")] = 4,
    dtype: DtypeOption = "float32",
    device: DeviceOption = None,
    device_map: DeviceMapOption = None,
    engine: EngineOption = "sglang",
    json_out: JsonOption = False,
) -> None:
    """Exact offline accept lengths: what greedy speculative decoding would accept on this data."""
    result = probe(target, drafter, prompts, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens,
                   max_new_tokens=max_new_tokens, responses=responses, features=features, temperature=temperature,
                   seed=seed, batch_size=batch_size, dtype=dtype, device=device, device_map=device_map,
                   engine=engine, progress=not json_out)
    if json_out:
        emit_json(result)
    else:
        render_probe(result)


def render_probe(result: ProbeResult, out: Console | None = None) -> None:
    out = out or console
    if result.estimate:
        _render_estimate(result, out)
        return
    cfg = result.config
    table = Table(title=f"probe: steps {cfg['steps']}, topk {cfg['topk']}, draft tokens {cfg['num_draft_tokens']} "
                        f"({cfg['flags_source']}), {cfg['responses']} continuations")
    for column in ("prompt", "tokens", "cycles", "mean accept", "off-greedy", "accept lengths"):
        table.add_column(column, justify="left" if column == "accept lengths" else "right")
    for r in result.results:
        mean = sum(r.accept_lengths) / r.num_cycles if r.num_cycles else 0.0
        lengths = " ".join(map(str, r.accept_lengths[:24])) + (" ..." if r.num_cycles > 24 else "")
        off = "-" if r.target_disagreement is None else f"{r.target_disagreement:.1%}"
        table.add_row(str(r.prompt_index), str(r.continuation_tokens), str(r.num_cycles), f"{mean:.2f}", off, lengths)
    out.print(table)
    by_step = "  ".join("-" if p is None else f"{p:.2f}" for p in result.acceptance_by_step)
    out.print(f"mean accept length [bold]{result.mean_accept_length:.3f}[/bold] "
                  f"(teacher-forced, a cycle at every position: {result.per_position_accept_length:.3f})")
    out.print(f"acceptance by draft step: {by_step}")
    out.print(f"accept-length histogram (1..{len(result.accept_length_histogram) - 1}): "
                  f"{' '.join(map(str, result.accept_length_histogram[1:]))}")
    out.print(f"vocabulary bound: {result.vocab_bound:.1%} of continuation tokens are in the draft vocabulary")
    if result.target_disagreement:
        out.print(f"[yellow]the target disagrees with {result.target_disagreement:.1%} of the given tokens: "
                      "accept lengths describe this text, not what the target would generate[/yellow]")
    if result.skipped_prompts:
        out.print(f"[yellow]skipped {result.skipped_prompts} prompt(s) as long as the target's context[/yellow]")


def _render_estimate(result: ProbeResult, out: Console) -> None:
    cfg = result.config
    by_step = "  ".join("-" if p is None else f"{p:.2f}" for p in result.acceptance_by_step)
    out.print(f"probe estimate at temperature {cfg['temperature']}: chain of {cfg['steps']} top-1 drafts, "
              f"{cfg['responses']} continuations")
    for r in result.results:
        value = "-" if r.expected_accept_length is None else f"{r.expected_accept_length:.3f}"
        out.print(f"  prompt {r.prompt_index}: expected accept length {value} over {r.continuation_tokens} tokens")
    out.print(f"expected accept length [bold]{result.mean_accept_length:.3f}[/bold] (estimate: the target's p of "
              f"each draft, along the text); expected acceptance by draft step: {by_step}")
    out.print(f"vocabulary bound: {result.vocab_bound:.1%} of continuation tokens are in the draft vocabulary")
