"""Usage errors end in click's usual message and exit 2, never a traceback, with the typer installed here
and with the oldest typer and click the requirements allow (``.ci/run`` installs those into a folder
named by ``DRAFTLAB_OLDEST_CLI``: typer >= 0.2x raises its own copy of click's exceptions)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).parents[2] / "src")
OLDEST = os.environ.get("DRAFTLAB_OLDEST_CLI")

USAGE_ERRORS = [
    (["nosuchcmd"], "No such command"),
    (["probe", "--nosuchflag"], "No such option"),
    (["probe", "--target"], "requires an argument"),
    (["generate", "--max-new-tokens", "many"], "Invalid value"),
    (["vocab", "nosuchsub"], "No such command"),
]


def _run(args: list[str], extra_path: str | None = None) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (extra_path, SRC) if p)
    return subprocess.run([sys.executable, "-m", "draftlab", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": path})


def _versions(extra_path: str | None) -> str:
    code = "import typer, importlib.metadata as m; print(typer.__version__, m.version('click'))"
    path = os.pathsep.join(p for p in (extra_path, SRC) if p)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path}).stdout.strip()


CLIS = [pytest.param(None, id="installed"),
        pytest.param(OLDEST, id="oldest", marks=pytest.mark.skipif(
            not OLDEST, reason="DRAFTLAB_OLDEST_CLI is not set (.ci/run installs the oldest typer and click there)"))]


@pytest.mark.parametrize("cli_path", CLIS)
@pytest.mark.parametrize(("args", "message"), USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_error_is_clicks_message_and_exit_2(cli_path, args, message):
    out = _run(args, cli_path)
    assert out.returncode == 2, (_versions(cli_path), out.stderr[-2000:])
    assert message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr, out.stderr[-2000:]


def test_oldest_cli_folder_holds_the_oldest_versions():
    if not OLDEST:
        pytest.skip("DRAFTLAB_OLDEST_CLI is not set")
    assert _versions(OLDEST).split() == ["0.12.0", "8.0.0"]
