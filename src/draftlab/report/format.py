"""Number formatting shared by the terminal renderers."""

from __future__ import annotations


def fmt(value: float | None, spec: str = ".1f") -> str:
    """``value`` formatted by ``spec``, or "-" when there is none."""
    return "-" if value is None else format(value, spec)
