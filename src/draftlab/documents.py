"""Results as JSON documents: plain JSON values, stamped with what produced them.

Every document draftlab writes (``--json`` on stdout, ``bench -o``, a sweep's summary) carries a
``provenance`` object: the command line, the versions of draftlab, Python, torch and transformers,
the torch threads a computing command used (:mod:`draftlab.threads`; null for commands that compute
nothing), whose attention kernels computed, whether the drafter's steps may be compiled and where a
greedy cycle's walk runs and how CUDA graphs are recorded (``DRAFTLAB_ATTENTION``, ``DRAFTLAB_DRAFTER``,
``DRAFTLAB_CYCLE``, ``DRAFTLAB_CAPTURE``: :mod:`draftlab.models.kernels`) and the time.
``draftlab report`` shows it under each result, so a page passed around in a pull request says how
each number was made. Versions are read from package metadata, without importing
torch or transformers (commands that load no model start instantly).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import shlex
from importlib import metadata
from pathlib import Path
from typing import Any

from draftlab import __version__

_command: list[str] | None = None  # the argv of the running ``draftlab`` command, set by the CLI
_threads: tuple[int, str] | None = None  # torch threads and where the count came from, set by use_threads


def record_command(argv: list[str]) -> None:
    """Remember the command line (without the program name) for :func:`provenance`."""
    global _command
    _command = list(argv)


def record_threads(count: int, source: str) -> None:
    """Remember the torch thread count a command computes with (and why) for :func:`provenance`."""
    global _threads
    _threads = (count, source)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def provenance() -> dict[str, Any]:
    """What produced a result: command, versions, platform and UTC time."""
    return {
        "command": None if _command is None else shlex.join(["draftlab", *_command]),
        "draftlab": __version__,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "platform": platform.platform(terse=True),
        "threads": None if _threads is None else _threads[0],
        "threads_from": None if _threads is None else _threads[1],
        "attention": os.environ.get("DRAFTLAB_ATTENTION", "torch"),  # read here without importing torch
        "drafter": os.environ.get("DRAFTLAB_DRAFTER", "eager"),
        "cycle": os.environ.get("DRAFTLAB_CYCLE", "host"),
        "capture": os.environ.get("DRAFTLAB_CAPTURE", "torch"),
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def to_jsonable(obj: Any) -> Any:
    """Turn result dataclasses (and paths, tuples) into plain JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def document(obj: Any) -> Any:
    """``obj`` as JSON values; a mapping gains ``provenance`` (unless it has one already)."""
    doc = to_jsonable(obj)
    if isinstance(doc, dict) and "provenance" not in doc:
        doc["provenance"] = provenance()
    return doc
