"""Atomic outputs: nothing a user sees is ever half-written.

Files are written to a temporary sibling and renamed into place; directories are built in a
temporary sibling folder and renamed as a whole. An interrupted write leaves no partial output.
``tempfile`` creates both private (0600 / 0700); they are given the mode a plain write or ``mkdir``
would under the user's umask before the rename, so an engine running as another user (as in a
container) can read what draftlab writes. A write that fails (disk full, no permission) removes the
temporary and is one :class:`DraftlabError` line saying what happened.

:func:`refuse_overlap` is the one output rule every command checks before it runs: an output is never
an input, inside one or holding one (by path and by file identity), and never a device, FIFO or socket
(the rename that protects regular files would replace them). The atomic writers refuse special
files themselves too, so no writer can destroy one. An output named by a symlink is written through
it to the regular file it leads to (the link stays); a link that dangles or leads into ``/proc``
(``/proc/self/fd/1``, ``/dev/stdout``) is refused.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from draftlab.errors import DraftlabError
from draftlab.readable import present, special_kind


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


def _inner_os_error(exc: Exception) -> OSError | None:
    """The OSError inside a library's own write error, None when it is something else: safetensors
    says "I/O error: ... (os error N)", torch's zip writer "unexpected pos" or "failed writing file"
    when the disk fills mid-write."""
    text = str(exc)
    found = re.search(r"\(os error (\d+)\)", text)
    if found:
        code = int(found.group(1))
        return OSError(code, os.strerror(code))
    if "unexpected pos" in text or "failed writing file" in text:
        return OSError(errno.EIO, "the write stopped short (is the disk full?)")
    return None


@contextlib.contextmanager
def _said_as_write_error(dest: Path, tmp: Path | None = None) -> Iterator[None]:
    """Turn an OSError (or a library's write error around one) raised while writing ``dest`` through
    ``tmp`` into the one line :func:`_write_failed` says; anything else passes unchanged."""
    try:
        yield
    except OSError as exc:
        raise _write_failed(dest, exc, tmp) from None
    except Exception as exc:
        inner = _inner_os_error(exc)
        if inner is None:
            raise
        raise _write_failed(dest, inner, tmp) from None


@contextlib.contextmanager
def atomic_path(dest: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; on success rename it onto ``dest``."""
    dest = Path(dest)
    refuse_special(dest)
    dest = written_path(dest)
    with _said_as_write_error(dest):
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
        os.close(fd)
    tmp = Path(name)
    try:
        with _said_as_write_error(dest, tmp):
            yield tmp
            if tmp.exists():
                _plain_mode(tmp, 0o666)
            os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


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
    refuse_special(dest, folder=True)
    if dest.exists() and not overwrite:
        raise DraftlabError("already exists; choose a new output path", path=dest)
    with _said_as_write_error(dest):
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        with _said_as_write_error(dest, tmp):
            yield tmp
            _plain_mode(tmp, 0o777)
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def refuse_overlap(out: str | Path, inputs: Mapping[str, str | Path | Iterable[str | Path] | None], *,
                   folder: bool = False) -> None:
    """The one output rule, checked before anything runs: refuse ``out`` when writing it would destroy or
    swallow something. ``inputs`` maps each input's label (its option) to a path, a list of paths or None.

    Refused: an output that exists and is not what it is meant to be (a regular file, or a folder when
    ``folder``): a device, FIFO or socket would be replaced by the atomic rename; an output that is an
    input, lies inside one or holds one, by resolved path and by file identity (the same inode through a
    hard link, a symlink or a bind mount); a file output that is the same file as anything inside a
    folder input (a Hugging Face snapshot's weights are links into ``blobs``).
    """
    out = Path(out)
    out_real = _resolved(out, "the output")
    out_id = _identity(out_real)
    out_above = _ancestor_ids(out_real)
    for label, given in inputs.items():
        for one in _paths(given):
            real = _resolved(one, label)
            real_id = _identity(real)
            if out_real == real or (out_id is not None and out_id == real_id):
                same = "" if out_real == real else f" ({one}, the same file under another name)"
                raise DraftlabError(f"is {label} itself{same}; write the output somewhere else", path=out)
            if out_real.is_relative_to(real) or (real_id is not None and real_id in out_above):
                raise DraftlabError(f"is inside {label} ({one}); write the output somewhere else", path=out)
            if real.is_relative_to(out_real) or (out_id is not None and out_id in _ancestor_ids(real)):
                raise DraftlabError(f"holds {label} ({one}); write the output somewhere else", path=out)
            twin = _same_file_inside(real, out_id) if out_id is not None and not folder else None
            if twin is not None:
                raise DraftlabError(f"is {twin}, a file of {label} ({one}), under another name; write the output "
                                    "somewhere else", path=out)
    refuse_special(out, folder=folder)


def local_inputs(**given: str | Path | None) -> dict[str, Path | None]:
    """``--name``: path for each value that is a local path (a hub id such as ``org/model`` is left out)."""
    return {f"--{name.replace('_', '-')}": Path(v) if v is not None and present(v) else None
            for name, v in given.items()}


def refuse_special(out: Path, *, folder: bool = False) -> None:
    """Refuse an output that exists and is not a regular file (or, with ``folder``, not a folder), and a
    symlink that leads where writing cannot go (:func:`_refuse_link`)."""
    _refuse_link(out)
    try:
        mode = os.stat(out).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DraftlabError("is a symlink loop; remove the link or write the output elsewhere", path=out) from None
        return  # not there, or unreachable: writing it will say why in one line
    if folder and not stat.S_ISDIR(mode):
        kind = "a file" if stat.S_ISREG(mode) else special_kind(mode)
        raise DraftlabError(f"is {kind}, not a folder; give a new folder for the output", path=out)
    if not folder and not stat.S_ISREG(mode):
        if stat.S_ISDIR(mode):
            raise DraftlabError("is a folder; give a file path for the output", path=out)
        raise DraftlabError(f"is {special_kind(mode)}, not a regular file, and writing the output would replace it; "
                            "write to a regular file", path=out)


def written_path(out: Path) -> Path:
    """Where an output file is written: ``out``, or for a symlink the file it leads to, so that the link
    stays a link (the rename that makes writes atomic would otherwise replace the link itself)."""
    return out.resolve() if out.is_symlink() else out


def _refuse_link(out: Path) -> None:
    """Refuse an output that is a symlink leading nowhere (dangling) or into ``/proc`` (a process's open
    file: ``/proc/self/fd/1``, and ``/dev/stdout`` and ``/dev/fd/N``, which lead there): writing through it
    could not reach what the user meant, and replacing it would destroy the link. A link to a device is
    :func:`refuse_special`'s to refuse."""
    if not out.is_symlink():
        return
    current = out.absolute()
    for _ in range(40):  # the kernel's own limit on links followed; a loop is refuse_special's to name
        if not current.is_symlink():
            break
        current = Path(os.path.normpath(current.parent / os.readlink(current)))
        if current.parts[1:2] == ("proc",):  # /dev/stdout and /dev/fd/N lead here too
            via = "" if str(current) == os.readlink(out) else f", which leads to {current}"
            raise DraftlabError(f"is a link to {os.readlink(out)}{via}: a process's open file (standard output, "
                                "say), which an output file cannot replace; give a file path (or redirect the "
                                "command's output)", path=out)
    else:
        return
    if not os.path.exists(out):
        raise DraftlabError(f"is a link to {os.readlink(out)}, which does not exist; give a path that is not a "
                            "dangling link (or create what it points to)", path=out)


def _paths(given: str | Path | Iterable[str | Path] | None) -> list[Path]:
    if given is None:
        return []
    if isinstance(given, (str, os.PathLike)):
        return [Path(given)]
    return [Path(g) for g in given if g is not None]


def _resolved(path: Path, label: str) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # Python < 3.13 raises RuntimeError on a symlink loop
        raise DraftlabError(f"{label} is a symlink loop (its links lead back to themselves); point the link at a "
                            "real file or folder", path=path) from None


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what ``path`` names, or None when nothing is there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _ancestor_ids(path: Path) -> set[tuple[int, int]]:
    """Identities of the folders above ``path`` that exist (a bind mount of an input folder is caught)."""
    return {i for i in map(_identity, path.parents) if i is not None}


def _same_file_inside(folder: Path, target: tuple[int, int]) -> Path | None:
    """A file under ``folder`` (symlinks followed for files, not for folders) that is ``target``."""
    if not os.path.isdir(folder):
        return None
    for root, _dirs, files in os.walk(folder):
        for name in files:
            if _identity(Path(root) / name) == target:
                return Path(root) / name
    return None
