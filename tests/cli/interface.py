"""The interface others depend on, as data: every command's options and every result's JSON fields.

    python tests/cli/interface.py > tests/cli/interface_snapshot.json   # after a deliberate change

Commands are read from the Typer app (name, flags, default, whether required); JSON field names
from every dataclass in ``draftlab`` (``--json`` prints result dataclasses field by field), keyed by
class name so that moving a module between packages changes nothing here.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
from typing import Any

import typer

import draftlab
from draftlab.cli.app import app


def _param(p: Any) -> dict[str, Any]:
    default = p.default if isinstance(p.default, (str, int, float, bool, type(None))) else repr(p.default)
    return {"opts": sorted(p.opts + p.secondary_opts), "default": default, "required": p.required,
            "multiple": bool(getattr(p, "multiple", False))}


def commands() -> dict[str, dict[str, dict[str, Any]]]:
    """Every command path (``vocab build``) with its parameters by name."""
    out: dict[str, dict[str, dict[str, Any]]] = {}

    def walk(cmd: Any, path: str) -> None:
        if cmd.params or not hasattr(cmd, "commands"):
            out[path] = {p.name: _param(p) for p in cmd.params if p.name}
        for name, sub in getattr(cmd, "commands", {}).items():  # a group (typer >= 0.22 vendors its own click)
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return out


def json_fields() -> dict[str, list[str]]:
    """Field names of every dataclass defined in draftlab, by class name."""
    out: dict[str, list[str]] = {}
    for info in pkgutil.walk_packages(draftlab.__path__, "draftlab."):
        if info.name == "draftlab.__main__":  # runs the app when imported
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
                    and not obj.__name__.startswith("_")):
                assert obj.__qualname__ not in out, f"two result classes named {obj.__qualname__}"
                out[obj.__qualname__] = sorted(f.name for f in dataclasses.fields(obj))
    return dict(sorted(out.items()))


def interface() -> dict[str, Any]:
    return {"commands": commands(), "json_fields": json_fields()}


if __name__ == "__main__":
    print(json.dumps(interface(), indent=1, sort_keys=True))
