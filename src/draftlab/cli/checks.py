"""Validation at the edge: every number and device is checked while the options are parsed, so a bad
value is one line (exit 2) before anything loads, never a traceback from deep inside a run."""

from __future__ import annotations

import math
from typing import Any, Callable

from draftlab.errors import DraftlabError


def _option_name(param: Any) -> str:
    return max(param.opts, key=len) if getattr(param, "opts", None) else f"--{param.name.replace('_', '-')}"


def checked(*, minimum: float | None = None, above: float | None = None,
            maximum: float | None = None) -> Callable[[Any, Any, Any], Any]:
    """An option callback refusing NaN, infinity and values outside ``[minimum, maximum]`` (or not
    ``> above``), in one line that names the option; None (not given) passes."""
    want = " and ".join(w for w in (f">= {minimum:g}" if minimum is not None else "",
                                     f"> {above:g}" if above is not None else "",
                                     f"<= {maximum:g}" if maximum is not None else "") if w)

    def check(ctx: Any, param: Any, value: Any) -> Any:
        if value is None:
            return value
        for v in value if isinstance(value, (list, tuple)) else [value]:
            kind = "finite number" if isinstance(v, float) else "whole number"
            if isinstance(v, float) and not math.isfinite(v) or minimum is not None and v < minimum \
                    or above is not None and v <= above or maximum is not None and v > maximum:
                raise DraftlabError(f"{_option_name(param)} {v:g}: must be a {kind} {want}".rstrip())
        return value
    return check


non_negative = checked(minimum=0)
positive = checked(above=0)
at_least_one = checked(minimum=1)
share = checked(minimum=0, maximum=1)


def check_device(ctx: Any, param: Any, value: str | None) -> str | None:
    """Option callback: a device that exists here (cpu, cuda[:N] within the GPU count, mps where built)."""
    if value is None or value == "cpu" or ctx.get_parameter_source(param.name).name == "DEFAULT":
        return value  # a default device is checked where it is used (profile's cuda may go unused)
    from draftlab.models.devices import parse_device

    try:
        parse_device(value)
    except DraftlabError as exc:
        raise DraftlabError(f"{_option_name(param)}: {exc}") from None
    return value
