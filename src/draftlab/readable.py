"""What a path given to read is, asked of ``os.stat`` before anything opens it.

Readers open only regular files: opening a FIFO blocks until a writer comes (``inspect`` on a FIFO
named ``model.safetensors`` hung forever), a device never ends, a socket cannot be opened. And the
reason a path cannot be read is said as it is: a symlink loop is not "no such file", a folder given
as a file is not "not found". Every failure is one :class:`DraftlabError` line naming the path.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from draftlab.errors import DraftlabError

_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(mode: int) -> str | None:
    """``"a named pipe (FIFO)"``, ``"a character device"``... for a special file's mode; None otherwise."""
    return next((name for test, name in _SPECIAL if test(mode)), None)


def present(path: str | Path) -> bool:
    """Something is at ``path``, even a link that leads nowhere or a FIFO (which ``Path.is_file`` hides)."""
    return os.path.lexists(path)


def stat_input(path: str | Path, missing: str = "not found") -> os.stat_result:
    """``os.stat(path)``; every failure is one line with its true reason (``missing`` when nothing is there)."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise DraftlabError(f"is a symlink to {os.readlink(path)}, which does not exist", path=path) from None
        raise DraftlabError(missing, path=path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DraftlabError("is a symlink loop (its links lead back to themselves); point the link at a real "
                                "file or folder", path=path) from None
        if exc.errno == errno.ENOTDIR:
            raise DraftlabError(f"{missing} (a part of its path is a file, not a folder)", path=path) from None
        raise DraftlabError(f"cannot read ({exc.strerror or exc})", path=path) from None


def regular_file(path: str | Path, missing: str = "not found") -> Path:
    """``path`` once it is known to be a regular file (or a link to one); else one line saying what it is."""
    path = Path(path)
    mode = stat_input(path, missing).st_mode
    if stat.S_ISREG(mode):
        return path
    if stat.S_ISDIR(mode):
        raise DraftlabError("is a folder; expected a file", path=path)
    raise DraftlabError(f"is {special_kind(mode) or 'not a regular file'}, not a regular file; draftlab reads "
                        "only regular files (copy its contents into one)", path=path)


def input_folder(path: str | Path, missing: str = "no such file or folder") -> Path:
    """``path`` once it is known to be a folder; else one line saying what it is."""
    path = Path(path)
    mode = stat_input(path, missing).st_mode
    if not stat.S_ISDIR(mode):
        kind = "a file" if stat.S_ISREG(mode) else special_kind(mode) or "not a folder"
        raise DraftlabError(f"is {kind}; expected a folder", path=path)
    return path
