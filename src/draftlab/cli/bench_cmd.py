"""``draftlab bench`` (one streaming benchmark run) and ``draftlab bench compare`` (runs side by side)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one, positive
from draftlab.cli.groups import grouped
from draftlab.cli.options import PromptsOption, request_options
from draftlab.cli.output import JsonOption, emit_json, show
from draftlab.console import console, err_console
from draftlab.documents import document
from draftlab.errors import DraftlabError
from draftlab.fsutil import refuse_overlap, write_json_atomic
from draftlab.report.bench import render_bench, render_bench_compare

bench_app = typer.Typer(help="Benchmark a serving endpoint (SGLang, vLLM, draftlab serve).", no_args_is_help=False)
app.add_typer(bench_app, name="bench")


@bench_app.callback(invoke_without_command=True)
@grouped
def bench(
    ctx: typer.Context,
    base_url: Annotated[Optional[str], typer.Option(
        "--base-url", help="Server root, e.g. http://127.0.0.1:30000.")] = None,
    api: Annotated[str, typer.Option("--api", help="openai-chat | openai | sglang (/generate).")] = "openai-chat",
    prompts: PromptsOption = None,
    num_prompts: Annotated[Optional[int], typer.Option(
        "--num-prompts", callback=at_least_one, help="Requests to measure (prompts are cycled).")] = None,
    concurrency: Annotated[Optional[int], typer.Option(
        "--concurrency", callback=at_least_one, help="Max requests in flight (default 1).")] = None,
    request_rate: Annotated[Optional[float], typer.Option(
        "--request-rate", callback=positive, help="Poisson arrivals per second.")] = None,
    request: dict[str, Any] = request_options(warmup="Unmeasured requests first."),
    model: Annotated[Optional[str], typer.Option(
        "--model", help="OpenAI model name (default: first of /v1/models).")] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", callback=positive, help="Seconds the whole run may take: model lookup, warm-up, server probes "
                                             "and requests (those still open then fail as timeout); also each "
                                             "request's limit without data.")] = 600.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the Poisson arrivals.")] = 0,
    label: Annotated[Optional[str], typer.Option("--label", help="Arm name for bench compare.")] = None,
    synthetic_acceptance: Annotated[Optional[str], typer.Option(
        "--synthetic-acceptance", help="The server forces this acceptance (a profile file or a mean accept length, "
                                       "as given to launch/serve): recorded in the result's config.")] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the result JSON here.")] = None,
    json_out: JsonOption = False,
) -> int:
    """Stream requests to a server and report TTFT, ITL, TPOT, E2E, throughput and accept length."""
    if ctx.invoked_subcommand is not None:
        return 0
    from draftlab.bench.client import BenchConfig
    from draftlab.bench.run import run_bench
    from draftlab.bench.workload import load_prompts

    if base_url is None or prompts is None:
        raise DraftlabError("bench needs --base-url URL and --prompts FILE (or: draftlab bench compare A.json B.json)")
    from draftlab.acceptance.synthetic import parse_synthetic

    synthetic = None if synthetic_acceptance is None else parse_synthetic(synthetic_acceptance)
    if output is not None:
        refuse_overlap(output, {"--prompts": prompts, "--synthetic-acceptance": synthetic and synthetic.profile})
    config = BenchConfig(
        base_url=base_url.rstrip("/"), api=api, num_prompts=num_prompts, concurrency=concurrency,
        request_rate=request_rate, **request, model=model, timeout_s=timeout, seed=seed, label=label, run_timeout_s=timeout,
        synthetic_acceptance=None if synthetic is None else synthetic.record(),
    )
    rows = load_prompts(prompts)
    total = num_prompts or len(rows)
    with Progress(TextColumn("bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task("requests", total=total)
        result = run_bench(config, rows, on_done=lambda _r: progress.advance(task))
    doc = document(result)  # one provenance for the file and stdout
    if output is not None:
        write_json_atomic(output, doc)
    if json_out:
        emit_json(doc)
    else:
        render_bench(result, console, output)
    if result.config["interrupted"]:
        err_console.print("draftlab: interrupted; partial result" + (f" written to {output}" if output else ""))
        return 130
    if result.completed == 0:
        err_console.print(f"draftlab: no request completed ({result.failed} failed); is the server at {base_url} up?",
                          markup=False)
        return 1
    return 0


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
    from draftlab.bench.compare import compare_results

    if plot is not None:
        refuse_overlap(plot, {"a result file": files})
    result = compare_results(files, baseline=baseline, plot=plot)
    show(result, json_out, render_bench_compare)
    return 0
