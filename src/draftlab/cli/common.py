"""Rendering helpers shared by the commands: JSON on stdout, rich output for people."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

# options that several model-running commands take, spelled and explained once
DeviceOption = Annotated[Optional[str], typer.Option("--device", help="cpu, cuda or cuda:N (default cpu).")]
DeviceMapOption = Annotated[Optional[str], typer.Option(
    "--device-map", help="auto: split the target across the GPUs (accelerate); not with --device.")]
EngineOption = Annotated[str, typer.Option(
    "--engine", help="Whose aux-layer convention to read from the drafter config: sglang or vllm.")]
DtypeOption = Annotated[str, typer.Option("--dtype", help="float32, bfloat16 or float16.")]
StepsOption = Annotated[Optional[int], typer.Option("--steps", help="SGLang --speculative-num-steps.")]
TopkOption = Annotated[Optional[int], typer.Option("--topk", help="SGLang --speculative-eagle-topk.")]
NumDraftTokensOption = Annotated[Optional[int], typer.Option(
    "--num-draft-tokens", help="SGLang --speculative-num-draft-tokens (root included).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def to_jsonable(obj: Any) -> Any:
    """Turn result dataclasses (and paths, tuples) into plain JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def emit_json(obj: Any) -> None:
    """Print one JSON document on stdout and nothing else."""
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2) + "\n")
    sys.stdout.flush()
