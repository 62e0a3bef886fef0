"""The one console for results (stdout) and the one for progress, warnings and errors (stderr)."""

from __future__ import annotations

from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)
