"""Atomic outputs: nothing a user sees is ever half-written.

Files are written to a temporary sibling and renamed into place; directories are built in a
temporary sibling folder and renamed as a whole. An interrupted write leaves no partial output.
``tempfile`` creates both private (0600 / 0700); they are given the mode a plain write or ``mkdir``
would under the user's umask before the rename, so an engine running as another user (as in a
container) can read what draftlab writes. A write that fails (disk full, no permission) removes the
temporary and is one :class:`DraftlabError` line saying what happened. :func:`refuse_overlap` keeps
a command's output away from its inputs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from draftlab.errors import DraftlabError


def _umask() -> int:
    """The process umask (read by setting and restoring it: there is no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _plain_mode(path: Path, full: int) -> None:
    """Give ``path`` the mode ``open``/``mkdir`` would: ``full`` (0666 files, 0777 folders) less the umask."""
    os.chmod(path, full & ~_umask())


def _write_failed(dest: Path, exc: OSError, tmp: Path | None) -> DraftlabError:
    """One line for an OSError while writing ``dest`` (through ``tmp``); nothing of the output was left.

    An error on a file that is not part of the output (an input read while writing) is named.
    """
    name = Path(exc.filename) if exc.filename else None
    ours = (name is None or name == dest or dest.is_relative_to(name) or name.name.startswith(f".{dest.name}.")
            or (tmp is not None and name.is_relative_to(tmp)))
    why = exc.strerror or str(exc)
    if ours and exc.errno == errno.ENOSPC:
        why += " (free some space or write elsewhere)"
    elif ours and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        why += " (write somewhere you may write)"
    where = "" if ours else f" ({exc.filename})"
    return DraftlabError(f"cannot write: {why}{where}; nothing was written", path=dest)


@contextlib.contextmanager
def atomic_path(dest: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; on success rename it onto ``dest``."""
    dest = Path(dest)
    tmp_path: Path | None = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        yield tmp_path
        if tmp_path.exists():
            _plain_mode(tmp_path, 0o666)
        os.replace(tmp_path, dest)
    except OSError as exc:
        raise _write_failed(dest, exc, tmp_path) from None
    finally:
        if tmp_path is not None:
            tmp_path.unlink(missing_ok=True)


def write_text_atomic(dest: str | Path, text: str) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_text(text)


def write_json_atomic(dest: str | Path, obj: Any) -> None:
    write_text_atomic(dest, json.dumps(obj, indent=2) + "\n")


@contextlib.contextmanager
def atomic_dir(dest: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``dest``; on success it becomes ``dest``.

    ``dest`` must not exist unless ``overwrite`` is set, so a user's folder is never merged into.
    """
    dest = Path(dest)
    if dest.exists() and not overwrite:
        raise DraftlabError("already exists; choose a new output path", path=dest)
    tmp: Path | None = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
        yield tmp
        _plain_mode(tmp, 0o777)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except OSError as exc:
        raise _write_failed(dest, exc, tmp) from None
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def refuse_overlap(out: str | Path, inputs: dict[str, str | Path | None]) -> None:
    """Refuse an output path that is one of the ``inputs`` (named by their option), lies inside one,
    or holds one: no command writes into or over what it reads."""
    out_real = Path(out).resolve()
    for label, given in inputs.items():
        if given is None:
            continue
        real = Path(given).resolve()
        if out_real == real:
            raise DraftlabError(f"is {label} itself; write the output somewhere else", path=out)
        if out_real.is_relative_to(real):
            raise DraftlabError(f"is inside {label} ({given}); write the output somewhere else", path=out)
        if real.is_relative_to(out_real):
            raise DraftlabError(f"holds {label} ({given}); write the output somewhere else", path=out)
