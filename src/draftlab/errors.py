"""The one user-facing error type.

Anything a user can cause (a missing file, a corrupt header, a drafter that cannot work with a
target) raises :class:`DraftlabError` with a message that names the file or field, says what is
wrong and, where possible, what to do. The CLI prints it as one line and exits with code 2.
"""

from __future__ import annotations

from pathlib import Path


class DraftlabError(Exception):
    """An input cannot be used. The message is a complete sentence meant for the user."""

    def __init__(self, message: str, *, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        super().__init__(f"{path}: {message}" if path is not None else message)
