"""``draftlab bench`` (one streaming benchmark run) and ``draftlab bench compare`` (runs side by side)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from draftlab.bench.client import BenchConfig
from draftlab.bench.compare import CompareResult, compare_results
from draftlab.bench.result import BenchResult
from draftlab.bench.run import run_bench
from draftlab.bench.workload import load_prompts
from draftlab.cli.app import app
from draftlab.cli.common import (
    IgnoreEosOption, JsonOption, MaxTokensOption, PromptsOption, TemperatureOption, TimeoutOption, console, emit_json,
    err_console, to_jsonable,
)
from draftlab.errors import DraftlabError
from draftlab.fsutil import write_json_atomic

bench_app = typer.Typer(help="Benchmark a serving endpoint (SGLang, vLLM, draftlab serve).", no_args_is_help=False)
app.add_typer(bench_app, name="bench")


@bench_app.callback(invoke_without_command=True)
def bench(
    ctx: typer.Context,
    base_url: Annotated[Optional[str], typer.Option(
        "--base-url", help="Server root, e.g. http://127.0.0.1:30000.")] = None,
    api: Annotated[str, typer.Option("--api", help="openai-chat | openai | sglang (/generate).")] = "openai-chat",
    prompts: PromptsOption = None,
    num_prompts: Annotated[Optional[int], typer.Option(
        "--num-prompts", help="Requests to measure (prompts are cycled).")] = None,
    concurrency: Annotated[Optional[int], typer.Option(
        "--concurrency", help="Max requests in flight (default 1).")] = None,
    request_rate: Annotated[Optional[float], typer.Option(
        "--request-rate", help="Poisson arrivals per second.")] = None,
    max_tokens: MaxTokensOption = 128,
    ignore_eos: IgnoreEosOption = False,
    temperature: TemperatureOption = 0.0,
    warmup: Annotated[int, typer.Option("--warmup", help="Unmeasured requests first.")] = 1,
    model: Annotated[Optional[str], typer.Option(
        "--model", help="OpenAI model name (default: first of /v1/models).")] = None,
    timeout: TimeoutOption = 600.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the Poisson arrivals.")] = 0,
    label: Annotated[Optional[str], typer.Option("--label", help="Arm name for bench compare.")] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the result JSON here.")] = None,
    json_out: JsonOption = False,
) -> int:
    """Stream requests to a server and report TTFT, ITL, TPOT, E2E, throughput and accept length."""
    if ctx.invoked_subcommand is not None:
        return 0
    if base_url is None or prompts is None:
        raise DraftlabError("bench needs --base-url URL and --prompts FILE (or: draftlab bench compare A.json B.json)")
    config = BenchConfig(
        base_url=base_url.rstrip("/"), api=api, num_prompts=num_prompts, concurrency=concurrency,
        request_rate=request_rate, max_tokens=max_tokens, ignore_eos=ignore_eos, temperature=temperature,
        warmup=warmup, model=model, timeout_s=timeout, seed=seed, label=label,
    )
    rows = load_prompts(prompts)
    total = num_prompts or len(rows)
    with Progress(TextColumn("bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task("requests", total=total)
        result = run_bench(config, rows, on_done=lambda _r: progress.advance(task))
    if output is not None:
        write_json_atomic(output, to_jsonable(result))
    if json_out:
        emit_json(result)
    else:
        _render(result, output)
    if result.config["interrupted"]:
        err_console.print("draftlab: interrupted; partial result" + (f" written to {output}" if output else ""))
        return 130
    return 0


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _render(result: BenchResult, output: Path | None) -> None:
    c = result.config
    load = f"rate {c['request_rate']}/s" if c["request_rate"] else f"concurrency {c['concurrency'] or 1}"
    console.print(f"[bold]{c['api']}[/bold] {c['base_url']}  {load}  "
                  f"{result.completed} ok, {result.failed} failed in {result.duration_s:.2f} s")
    table = Table(show_edge=False)
    for col in ("metric", "mean", "p50", "p90", "p99"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for name, stats in (("TTFT ms", result.ttft_ms), ("TPOT ms", result.tpot_ms),
                        ("ITL ms (per chunk)", result.itl_ms), ("E2E ms", result.e2e_ms)):
        table.add_row(name, *(_fmt(stats[k]) for k in ("mean", "p50", "p90", "p99")))
    console.print(table)
    console.print(f"output {result.output_throughput:.1f} tok/s, {result.request_throughput:.2f} req/s")
    if result.accept_length is not None:
        pos = ", ".join(f"{x:.2f}" for x in result.acceptance_by_position or [])
        console.print(f"accept length {result.accept_length:.3f}" + (f"  per position: {pos}" if pos else ""))
    else:
        console.print(f"accept length: - ({c['spec_metrics']})")
    for err in result.errors:
        console.print(f"[red]{err['kind']}[/red] x{err['count']}: {err['example']}")
    if output is not None:
        console.print(f"wrote {output}")


@bench_app.command("compare")
def compare(
    files: Annotated[list[Path], typer.Argument(help="Result files from bench -o.")],
    baseline: Annotated[Optional[str], typer.Option(
        "--baseline", help="Label of the baseline arm (default: the first file's).")] = None,
    plot: Annotated[Optional[Path], typer.Option(
        "--plot", help="Write a PNG of throughput and TPOT vs concurrency.")] = None,
    json_out: JsonOption = False,
) -> int:
    """Compare benchmark runs: throughput, latency and speedup over the baseline at equal load."""
    result = compare_results(files, baseline=baseline, plot=plot)
    if json_out:
        emit_json(result)
        return 0
    _render_compare(result)
    return 0


def _render_compare(result: CompareResult) -> None:
    table = Table(title=f"baseline: {result.baseline}", show_edge=False)
    cols = ("arm", "load", "ok/failed", "out tok/s", "speedup", "TTFT p50", "TPOT mean", "ITL p50", "E2E p50", "accept len")
    for col in cols:
        table.add_column(col, justify="left" if col == "arm" else "right")
    for r in result.rows:
        load = f"{r.request_rate}/s" if r.request_rate else f"c={r.concurrency}"
        table.add_row(r.label, load, f"{r.completed}/{r.failed}", _fmt(r.output_throughput),
                      "-" if r.speedup is None else f"{r.speedup:.2f}x", _fmt(r.ttft_p50_ms), _fmt(r.tpot_mean_ms),
                      _fmt(r.itl_p50_ms), _fmt(r.e2e_p50_ms), _fmt(r.accept_length, ".3f"))
    console.print(table)
    if result.plot is not None:
        console.print(f"wrote {result.plot}")
