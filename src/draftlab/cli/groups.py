"""Option groups: options that many commands spell alike, declared once and handed to a command as one object.

A command names a group by a parameter whose default is an :class:`OptionGroup` (``where: Placement =
placement()``). :func:`grouped` writes the group's options into the signature Typer reads, at that
parameter's place, and calls the command with the object the group builds from them. A group option the
command declares itself (``--threads`` last, or a help text of its own) keeps the command's place, default
and help; the command still receives it, and the group reads it too.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

Command = TypeVar("Command", bound=Callable[..., Any])


@dataclass(frozen=True)
class OptionGroup:
    """The options of one group in --help order, and what builds the command's object from them by name."""

    options: tuple[inspect.Parameter, ...]
    build: Callable[..., Any]


def option(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    """One option of a group: the parameter Typer reads (``annotation`` an ``Annotated[..., typer.Option]``)."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def grouped(command: Command) -> Command:
    """``command`` with each of its :class:`OptionGroup` parameters spelled out as the group's options."""
    signature = inspect.signature(command, eval_str=True)
    declared = signature.parameters
    groups = {p.name: p.default for p in declared.values() if isinstance(p.default, OptionGroup)}
    params: list[inspect.Parameter] = []
    for p in declared.values():
        if p.name in groups:
            params += [o for o in groups[p.name].options if o.name not in declared]
        else:
            params.append(p)

    @functools.wraps(command)
    def run(**given: Any) -> Any:
        for name, group in groups.items():
            values = {o.name: (given[o.name] if o.name in declared else given.pop(o.name)) for o in group.options}
            given[name] = group.build(**values)
        return command(**given)

    # keyword-only parameters must not precede positional ones in a Signature: Typer passes all by keyword
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
    run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params} | {"return": signature.return_annotation}
    return run  # type: ignore[return-value]
