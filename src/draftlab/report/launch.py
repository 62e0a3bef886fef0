"""Terminal rendering of ``launch`` (rich): the engine command, ready to copy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from draftlab.engines.launch import EngineCommand


def render_launch(command: EngineCommand, console: Console, err_console: Console) -> None:
    """The environment and shell command; the notes go to ``err_console`` so stdout holds only those."""
    for key, value in command.env.items():
        console.print(f"[bold]env[/bold] {key}={value}")
    console.print(command.shell, soft_wrap=True, markup=False)
    for note in command.notes:
        err_console.print(f"  note: {note}", markup=False, soft_wrap=True)
