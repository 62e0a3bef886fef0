"""``draftlab convert``: a drafter in the other layout (SpecForge for SGLang, speculators for vLLM)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.output import JsonOption, emit_json
from draftlab.console import console


@app.command()
def convert(
    drafter: Annotated[Path, typer.Argument(help="The EAGLE-3 drafter folder (or a weights file beside its config).")],
    to: Annotated[str, typer.Option("--to", help="specforge (SGLang's layout) or speculators (vLLM's).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The new folder to write (must not exist).")],
    target: Annotated[Optional[Path], typer.Option(
        "--target", "-t", help="The target folder, named as the verifier by its absolute path and checked against the output; "
                             "with --to speculators also a hub id (named as given, not checked).")] = None,
    json_out: JsonOption = False,
) -> int:
    """Write DRAFTER in the other layout, tensors bit for bit. Exit 0 done (and check-clean with --target), 1 the
    written folder has a check error, 2 bad input."""
    from draftlab.compat.convert import convert_drafter

    result = convert_drafter(drafter, to, out, target=target)
    if json_out:
        emit_json(result)
    else:
        from draftlab.report.convert import render_convert

        render_convert(result, console)
    return 0 if result.check is None or result.check.ok else 1
