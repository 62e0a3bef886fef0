"""What a command prints: one JSON document on stdout with ``--json``, else its tables for people."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, Callable

import typer

from draftlab.console import console
from draftlab.documents import document

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def emit_json(obj: Any) -> None:
    """Print one JSON document (with its provenance) on stdout and nothing else."""
    sys.stdout.write(json.dumps(document(obj), indent=2) + "\n")
    sys.stdout.flush()


def show(result: Any, json_out: bool, render: Callable[..., None], *args: Any,
         as_json: Callable[[Any], Any] | None = None) -> None:
    """``--json``: ``result`` (or ``as_json(result)``) as one JSON document; else ``render(result, console,
    *args)``."""
    if json_out:
        emit_json(result if as_json is None else as_json(result))
    else:
        render(result, console, *args)
