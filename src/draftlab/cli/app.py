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
from draftlab.cli import compat_cmds  # noqa: E402,F401
from draftlab.cli import convert_cmd  # noqa: E402,F401
from draftlab.cli import plan_cmd  # noqa: E402,F401
from draftlab.cli import profile_cmd  # noqa: E402,F401
from draftlab.cli import vocab_cmd  # noqa: E402,F401
from draftlab.cli import generate_cmd  # noqa: E402,F401
from draftlab.cli import bench_cmd  # noqa: E402,F401
from draftlab.cli import launch_cmd  # noqa: E402,F401
from draftlab.cli import serve_cmd  # noqa: E402,F401
from draftlab.cli import probe_cmd  # noqa: E402,F401
from draftlab.cli import drift_cmd  # noqa: E402,F401
from draftlab.cli import sweep_cmd  # noqa: E402,F401
from draftlab.cli import train_cmd  # noqa: E402,F401
from draftlab.cli import capture_cmd  # noqa: E402,F401
from draftlab.cli import regenerate_cmd  # noqa: E402,F401
from draftlab.cli import report_cmd  # noqa: E402,F401
from draftlab.cli import assess_cmd  # noqa: E402,F401
