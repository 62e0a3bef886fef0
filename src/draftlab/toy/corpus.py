"""Toy training text: the Python standard library's own source, as bytes (no download needed).

Files are the ``*.py`` modules at the top of the stdlib folder in name order; even-numbered files
are training text, odd-numbered ones held-out text, so the two never overlap. Lines are stripped
of indentation and blank lines dropped: a model trained for seconds on indented code learns little
more than runs of spaces, and its greedy output would be nothing but spaces.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path


def stdlib_files() -> list[Path]:
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def stdlib_text(split: str, max_bytes: int) -> bytes:
    """Up to ``max_bytes`` of stdlib source: ``split`` is "train" (even files) or "heldout" (odd files)."""
    files = stdlib_files()[0 if split == "train" else 1::2]
    out = bytearray()
    for file in files:
        if len(out) >= max_bytes:
            break
        lines = (line.strip() for line in file.read_bytes().splitlines())
        out += b"\n".join(line for line in lines if line) + b"\n"
    return bytes(out[:max_bytes])
