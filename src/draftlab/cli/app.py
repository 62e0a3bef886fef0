"""The root Typer app; each command module adds its commands here."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="draftlab",
    help="Check, probe and benchmark EAGLE-3 drafters against their targets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


@app.callback()
def _root() -> None:
    """Check, probe and benchmark EAGLE-3 drafters against their targets."""


# Command modules register themselves on `app` when imported (one line each, below). They import torch,
# transformers and the modules that load them only inside the commands that load a model, so --help and
# every other command start at once (tests/cli/test_start_imports.py).
from draftlab.cli import (
    assess_cmd,  # noqa: E402,F401
    bench_cmd,  # noqa: E402,F401
    capture_cmd,  # noqa: E402,F401
    compat_cmds,  # noqa: E402,F401
    convert_cmd,  # noqa: E402,F401
    drift_cmd,  # noqa: E402,F401
    generate_cmd,  # noqa: E402,F401
    launch_cmd,  # noqa: E402,F401
    plan_cmd,  # noqa: E402,F401
    probe_cmd,  # noqa: E402,F401
    profile_cmd,  # noqa: E402,F401
    regenerate_cmd,  # noqa: E402,F401
    report_cmd,  # noqa: E402,F401
    serve_cmd,  # noqa: E402,F401
    sweep_cmd,  # noqa: E402,F401
    train_cmd,  # noqa: E402,F401
    vocab_cmd,  # noqa: E402,F401
)
