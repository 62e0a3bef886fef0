"""Terminal rendering of a ``convert`` result (rich)."""

from __future__ import annotations

import json

from rich.console import Console

from draftlab.compat.convert import ConvertResult
from draftlab.report.compat import render_check

_ENGINE = {"specforge": "SGLang", "speculators": "vLLM"}


def render_convert(result: ConvertResult, console: Console) -> None:
    weights = "" if result.weights_from == "safetensors" else f" ({result.weights_from} weights written as safetensors)"
    console.print(f"[bold]Wrote[/] {result.out}: {result.from_layout} -> {result.to_layout} layout, "
                  f"{result.tensors} tensors{weights}, bytes unchanged")
    if result.renamed:
        first, new = next(iter(result.renamed.items()))
        console.print(f"  renamed {len(result.renamed)} tensors ([red]{first}[/] -> [green]{new}[/], ...)")
    for change in result.config_changes:
        console.print(f"  [bold]{change.field}[/]: {json.dumps(change.before)} -> {json.dumps(change.after)}  "
                      f"[dim]{change.why}[/]")
    if result.hub_target is not None:
        console.print(f"[dim]not checked: --target {result.hub_target} is a hub id, not a local folder; "
                      f"check it against the target's folder for {_ENGINE[result.to_layout]}[/]")
        return
    if result.check is None:
        console.print(f"[dim]add --target TARGET to check it for {_ENGINE[result.to_layout]}[/]")
        return
    console.print(f"[bold]check on {result.out} ({_ENGINE[result.to_layout]}):[/]")
    render_check(result.check, console)
