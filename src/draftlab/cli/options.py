"""Options that several commands take, spelled and explained once (placement: :mod:`draftlab.cli.placement`;
the engine release: :mod:`draftlab.cli.deployed`; ``--json``: :mod:`draftlab.cli.output`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.checks import at_least_one, non_negative, positive
from draftlab.cli.groups import OptionGroup, option

# the models and the speculation shape (generate, probe, drift, train, serve, ...)
TargetOption = Annotated[Path, typer.Option("--target", help="Target model folder (Hugging Face layout).")]
DrafterOption = Annotated[Optional[Path], typer.Option("--drafter", help="EAGLE-3 drafter folder.")]
StepsOption = Annotated[Optional[int], typer.Option(
    "--steps", callback=at_least_one, help="SGLang --speculative-num-steps.")]
TopkOption = Annotated[Optional[int], typer.Option(
    "--topk", callback=at_least_one, help="SGLang --speculative-eagle-topk.")]
NumDraftTokensOption = Annotated[Optional[int], typer.Option(
    "--num-draft-tokens", callback=at_least_one, help="SGLang --speculative-num-draft-tokens (root included).")]
SamplingSeedOption = Annotated[Optional[int], typer.Option("--seed", help="Sampling seed (temperature > 0).")]
TemperatureOption = Annotated[float, typer.Option(
    "--temperature", callback=non_negative, help="Sampling temperature; 0 is greedy.")]

# the commands that start an engine server (launch, sweep)
TargetIdOption = Annotated[str, typer.Option("--target", help="Target model folder or hub id.")]
DrafterIdOption = Annotated[Optional[str], typer.Option(
    "--drafter", help="EAGLE-3 drafter folder or hub id (omit: baseline).")]
TpOption = Annotated[int, typer.Option("--tp", callback=at_least_one, help="Tensor-parallel size.")]
HostOption = Annotated[str, typer.Option("--host", help="Address the server listens on.")]
PortOption = Annotated[Optional[int], typer.Option(
    "--port", min=1, max=65535, help="Default: SGLang 30000, vLLM 8000, draftlab 30000.")]
HealthTimeoutOption = Annotated[float, typer.Option(
    "--health-timeout", callback=positive, help="Seconds to wait for the engine's /health.")]
SkipCheckOption = Annotated[bool, typer.Option("--skip-check", help="Launch without draftlab check.")]
DryRunOption = Annotated[bool, typer.Option(
    "--dry-run", help="Print each engine command and its environment only; start nothing.")]
SyntheticAcceptanceOption = Annotated[Optional[str], typer.Option(
    "--synthetic-acceptance", help="Force this acceptance instead of verifying drafts: an acceptance profile file "
                                   "(probe --profile-out; per-position rates) or a mean accept length (bonus "
                                   "included), in the engine's own synthetic mode.")]

# the commands that benchmark a server (bench, sweep)
PromptsOption = Annotated[Optional[Path], typer.Option(
    "--prompts", help="JSONL rows with prompt, messages or input_ids.")]
MaxTokensOption = Annotated[int, typer.Option(
    "--max-tokens", callback=at_least_one, help="Tokens to generate per request.")]
IgnoreEosOption = Annotated[bool, typer.Option("--ignore-eos", help="Generate exactly --max-tokens.")]


def request_options(warmup: str) -> OptionGroup:
    """What every benchmark request asks for (``--max-tokens``, ``--ignore-eos``, ``--temperature``) and the
    unmeasured requests first (``--warmup``, explained as ``warmup`` says), as the keywords the benchmark's
    config takes."""
    warmup_option = Annotated[int, typer.Option("--warmup", callback=non_negative, help=warmup)]
    return OptionGroup((option("max_tokens", MaxTokensOption, 128), option("ignore_eos", IgnoreEosOption, False),
                        option("temperature", TemperatureOption, 0.0), option("warmup", warmup_option, 1)), dict)
TimeoutOption = Annotated[float, typer.Option(
    "--timeout", callback=positive, help="Per-request seconds without data.")]
