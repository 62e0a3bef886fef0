"""Helpers the commands share: number lists and layer ids from the command line, out-of-memory errors as
one line, and which process of a ``torchrun`` job prints."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from draftlab.errors import DraftlabError


def parse_ints(option: str, text: str) -> list[int]:
    """Parse ``option``'s value like ``1,8,32`` into sorted, distinct positive integers."""
    try:
        values = sorted({int(v) for v in text.split(",")})
    except ValueError:
        raise DraftlabError(f"{option} {text!r}: expected integers like 1,8,32") from None
    if min(values) < 1:
        raise DraftlabError(f"{option} {text!r}: values must be positive")
    return values


# what the allocators say when memory runs out: torch.OutOfMemoryError (CUDA), the CPU allocator's
# RuntimeError, and RuntimeErrors of other backends and older torch
_OOM_PHRASES = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """True when ``exc`` is an allocator running out of memory (no torch import needed)."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and any(p in str(exc).lower() for p in _OOM_PHRASES)


def out_of_memory_detail(exc: BaseException) -> str:
    """The allocator's own first line (device, size), for the one-line error."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


@contextmanager
def lower_on_oom(**flags: Any) -> Iterator[None]:
    """Turn an out-of-memory error inside the block into one line naming the flags to lower.

    ``flags`` maps option names (``batch_size`` for ``--batch-size``) to their current values, in
    the order worth trying; the allocator's own first line stays in the message (device, size)."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
        lower = " or ".join(f"--{k.replace('_', '-')} (now {v})" for k, v in flags.items())
        raise DraftlabError(f"out of memory ({out_of_memory_detail(exc)}); lower {lower}") from None


def main_process() -> bool:
    """False on the other ranks of a ``torchrun`` job: only rank 0 prints the result."""
    import os

    return os.environ.get("RANK", "0") == "0"


def parse_layer_ids(text: str) -> list[int]:
    """``--aux-layers a,b,c`` as target layer ids (0 is a layer), in the order given."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise DraftlabError(f"--aux-layers {text!r}: expected layer numbers like 1,15,28")
    return [int(p) for p in parts]
