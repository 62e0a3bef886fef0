"""``draftlab inspect``, ``draftlab check [--fix]`` and ``draftlab demo``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.deployed import DraftWindowOption, EngineVersionOption, ShortEngineOption
from draftlab.cli.output import JsonOption, emit_json, show
from draftlab.cli.placement import ThreadsOption
from draftlab.console import console
from draftlab.errors import DraftlabError
from draftlab.threads import use_threads


@app.command()
def inspect(
    path: Annotated[Path, typer.Argument(help="Checkpoint folder, or a weights file beside its config.json.")],
    engine: ShortEngineOption = "sglang",
    target_layers: Annotated[Optional[int], typer.Option(help="Target layer count, to resolve default aux layers.")] = None,
    target: Annotated[Optional[Path], typer.Option("--target", "-t", help="A drafter's target folder: its depth, "
                                                   "and its family (SGLang reads DeepSeek/Kimi and gpt-oss ids by "
                                                   "their own rules).")] = None,
    engine_version: EngineVersionOption = None,
    json_out: JsonOption = False,
) -> int:
    """What a checkpoint is (target or drafter), from headers and config only."""
    from draftlab.compat.summary import inspect_checkpoint

    result = inspect_checkpoint(path, engine=engine, num_target_layers=target_layers, target=target,
                                engine_version=engine_version)
    if json_out:
        emit_json(result)
    else:
        from draftlab.report.compat import render_inspect

        render_inspect(result, console)
    return 0


@app.command()
def check(
    drafter: Annotated[Path, typer.Argument(help="The EAGLE-3 drafter folder, or mtp: the target's own MTP layers.")],
    target: Annotated[Path, typer.Option("--target", "-t", help="The target model folder.")],
    engine: ShortEngineOption = "sglang",
    engine_version: EngineVersionOption = None,
    draft_window: DraftWindowOption = None,
    fix: Annotated[Optional[Path], typer.Option("--fix", help="Write a fixed copy of the drafter here.")] = None,
    aux_layers: Annotated[Optional[str], typer.Option(
        "--aux-layers", help="With --fix: the 0-based target layers (a,b,c) whose outputs the drafter was trained "
        "on, written into both engines' fields.")] = None,
    json_out: JsonOption = False,
) -> int:
    """Every problem DRAFTER will have with TARGET in ENGINE. Exit 0 no error, 1 an error, 2 bad input."""
    from draftlab.report.compat import render_check, render_fix

    if _names_mtp(drafter):
        if fix is not None or aux_layers is not None or draft_window is not None:
            raise DraftlabError("check mtp checks the target's own MTP layers: --fix, --aux-layers and "
                                "--draft-window are for an EAGLE-3 drafter folder")
        from draftlab.compat.mtp import check_mtp

        result = check_mtp(target, engine=engine, engine_version=engine_version)
        show(result, json_out, render_check)
        return 0 if result.ok else 1

    layers = _layer_list(aux_layers) if aux_layers is not None else None
    if layers is not None and fix is None:
        raise DraftlabError("--aux-layers is written by --fix; add --fix OUT")
    if fix is None:
        from draftlab.compat import check_pair

        result = check_pair(drafter, target, engine=engine, engine_version=engine_version, draft_window=draft_window)
        show(result, json_out, render_check)
        return 0 if result.ok else 1
    from draftlab.compat import fix_pair

    fixed = fix_pair(drafter, target, fix, engine=engine, aux_layers=layers, engine_version=engine_version)
    if json_out:
        emit_json(fixed)
    else:
        render_check(fixed.before, console)
        render_fix(fixed, console)
    return 0 if fixed.after.ok else 1


def _names_mtp(drafter: Path) -> bool:
    """Whether DRAFTER is ``mtp``, the target's own MTP layers (a folder of that name here is ambiguous)."""
    if str(drafter) != "mtp":
        return False
    if drafter.is_dir():
        raise DraftlabError(f"mtp names the target's own MTP layers, but ./mtp is also a folder here; give the "
                            f"folder as {drafter.resolve()} or run from elsewhere")
    return True


def _layer_list(text: str) -> list[int]:
    """``"2,16,29"`` as a list of ints; anything else is one clear error."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise DraftlabError(f"--aux-layers {text!r} is not a comma-separated list of layer numbers "
                            "(e.g. --aux-layers 2,16,29)") from None


@app.command()
def demo(threads: ThreadsOption = None) -> int:
    """Build a small target and a mismatched drafter, then inspect, check, fix and check again."""
    use_threads(threads)
    from draftlab.demo import run_demo

    run_demo(console)
    return 0
