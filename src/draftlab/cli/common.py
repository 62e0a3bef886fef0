"""Helpers shared by the commands: option aliases, list parsing, JSON on stdout, rich output for people."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from draftlab.documents import document
from draftlab.errors import DraftlabError



# --- validation at the edge: every number and device is checked while the options are parsed, so a
# bad value is one line (exit 2) before anything loads, never a traceback from deep inside a run

def _option_name(param: Any) -> str:
    return max(param.opts, key=len) if getattr(param, "opts", None) else f"--{param.name.replace('_', '-')}"


def checked(*, minimum: float | None = None, above: float | None = None,
            maximum: float | None = None) -> Callable[[Any, Any, Any], Any]:
    """An option callback refusing NaN, infinity and values outside ``[minimum, maximum]`` (or not
    ``> above``), in one line that names the option; None (not given) passes."""
    want = " and ".join(w for w in (f">= {minimum:g}" if minimum is not None else "",
                                     f"> {above:g}" if above is not None else "",
                                     f"<= {maximum:g}" if maximum is not None else "") if w)

    def check(ctx: Any, param: Any, value: Any) -> Any:
        if value is None:
            return value
        for v in value if isinstance(value, (list, tuple)) else [value]:
            kind = "finite number" if isinstance(v, float) else "whole number"
            if isinstance(v, float) and not math.isfinite(v) or minimum is not None and v < minimum \
                    or above is not None and v <= above or maximum is not None and v > maximum:
                raise DraftlabError(f"{_option_name(param)} {v:g}: must be a {kind} {want}".rstrip())
        return value
    return check


non_negative = checked(minimum=0)
positive = checked(above=0)
at_least_one = checked(minimum=1)
share = checked(minimum=0, maximum=1)


def check_device(ctx: Any, param: Any, value: str | None) -> str | None:
    """Option callback: a device that exists here (cpu, cuda[:N] within the GPU count, mps where built)."""
    if value is None or value == "cpu" or ctx.get_parameter_source(param.name).name == "DEFAULT":
        return value  # a default device is checked where it is used (profile's cuda may go unused)
    from draftlab.models.devices import parse_device

    try:
        parse_device(value)
    except DraftlabError as exc:
        raise DraftlabError(f"{_option_name(param)}: {exc}") from None
    return value


# options that several model-running commands take, spelled and explained once
DeviceOption = Annotated[Optional[str], typer.Option(
    "--device", callback=check_device, help="cpu, cuda or cuda:N (default cpu).")]
ThreadsOption = Annotated[Optional[int], typer.Option(
    "--threads", callback=at_least_one, help="CPU threads torch computes with (default: $DRAFTLAB_THREADS, else "
                                             "the physical cores this process may use).")]
DeviceMapOption = Annotated[Optional[str], typer.Option(
    "--device-map", help="auto: split the target across the GPUs (accelerate); not with --device.")]
EngineOption = Annotated[str, typer.Option(
    "--engine", help="Whose aux-layer convention to read from the drafter config: sglang or vllm.")]
DtypeOption = Annotated[Optional[str], typer.Option(
    "--dtype", help="float32, bfloat16 or float16 (default bfloat16 on CUDA, float32 on the CPU).")]
StepsOption = Annotated[Optional[int], typer.Option(
    "--steps", callback=at_least_one, help="SGLang --speculative-num-steps.")]
TopkOption = Annotated[Optional[int], typer.Option(
    "--topk", callback=at_least_one, help="SGLang --speculative-eagle-topk.")]
NumDraftTokensOption = Annotated[Optional[int], typer.Option(
    "--num-draft-tokens", callback=at_least_one, help="SGLang --speculative-num-draft-tokens (root included).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
TargetOption = Annotated[Path, typer.Option("--target", help="Target model folder (Hugging Face layout).")]
SamplingSeedOption = Annotated[Optional[int], typer.Option("--seed", help="Sampling seed (temperature > 0).")]
TemperatureOption = Annotated[float, typer.Option(
    "--temperature", callback=non_negative, help="Sampling temperature; 0 is greedy.")]

# options of the commands that start an engine server (launch, sweep)
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

# options of the commands that benchmark a server (bench, sweep)
PromptsOption = Annotated[Optional[Path], typer.Option(
    "--prompts", help="JSONL rows with prompt, messages or input_ids.")]
MaxTokensOption = Annotated[int, typer.Option(
    "--max-tokens", callback=at_least_one, help="Tokens to generate per request.")]
IgnoreEosOption = Annotated[bool, typer.Option("--ignore-eos", help="Generate exactly --max-tokens.")]
TimeoutOption = Annotated[float, typer.Option(
    "--timeout", callback=positive, help="Per-request seconds without data.")]


def use_threads(option: int | None) -> int:
    """Set torch's CPU threads for this command, once: ``--threads``, ``$DRAFTLAB_THREADS`` or the physical
    cores this process may use (:mod:`draftlab.threads`); recorded in the result's provenance."""
    from draftlab.threads import use_threads as apply

    return apply(option)


def parse_ints(option: str, text: str) -> list[int]:
    """Parse ``option``'s value like ``1,8,32`` into sorted, distinct positive integers."""
    try:
        values = sorted({int(v) for v in text.split(",")})
    except ValueError:
        raise DraftlabError(f"{option} {text!r}: expected integers like 1,8,32") from None
    if min(values) < 1:
        raise DraftlabError(f"{option} {text!r}: values must be positive")
    return values


# what the allocators say when memory runs out: torch.OutOfMemoryError (CUDA), the CPU allocator's
# RuntimeError, and RuntimeErrors of other backends and older torch
_OOM_PHRASES = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """True when ``exc`` is an allocator running out of memory (no torch import needed)."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and any(p in str(exc).lower() for p in _OOM_PHRASES)


def out_of_memory_detail(exc: BaseException) -> str:
    """The allocator's own first line (device, size), for the one-line error."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


@contextmanager
def lower_on_oom(**flags: Any) -> Iterator[None]:
    """Turn an out-of-memory error inside the block into one line naming the flags to lower.

    ``flags`` maps option names (``batch_size`` for ``--batch-size``) to their current values, in
    the order worth trying; the allocator's own first line stays in the message (device, size)."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
        lower = " or ".join(f"--{k.replace('_', '-')} (now {v})" for k, v in flags.items())
        raise DraftlabError(f"out of memory ({out_of_memory_detail(exc)}); lower {lower}") from None


def main_process() -> bool:
    """False on the other ranks of a ``torchrun`` job: only rank 0 prints the result."""
    import os

    return os.environ.get("RANK", "0") == "0"


def parse_layer_ids(text: str) -> list[int]:
    """``--aux-layers a,b,c`` as target layer ids (0 is a layer), in the order given."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise DraftlabError(f"--aux-layers {text!r}: expected layer numbers like 1,15,28")
    return [int(p) for p in parts]


def emit_json(obj: Any) -> None:
    """Print one JSON document (with its provenance) on stdout and nothing else."""
    sys.stdout.write(json.dumps(document(obj), indent=2) + "\n")
    sys.stdout.flush()
