"""An interrupted ``assess`` keeps what finished: its parts, what each holds, and reading them back.

assess measures in parts (:data:`PARTS`). Ctrl-C once the first has finished writes DIR with a partial
``assess.json`` (``verdict`` null, ``missing`` naming the parts still to run, or ``verdict`` when only the
plan and the verdict were left) holding every finished
part's figures; ``assess --resume`` reads them back into the result classes they were written from and
runs only what is missing, so its figures are an uninterrupted run's. The check, the plan, the verdict
and the page are made again from them (seconds).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

from draftlab.errors import DraftlabError

PARTS = ("probe", "old", "profile")  # in the order they run
HOLDS = {  # the AssessResult fields each part fills
    "probe": ("coverage", "probes", "model_free", "slices", "repetition", "mtp_probes", "mtp"),
    "old": ("drift", "old_probes", "slices"),
    "profile": ("profile",),
}
INPUTS = ("drafter", "target", "old_target", "prompts", "engine", "grid", "batch_sizes", "max_new_tokens", "costs",
          "model_free", "device", "dtype", "context_tokens")  # config fields a resumed run must share with the interrupted one


def read_partial(out: Path, config: dict[str, Any], result_type: type) -> tuple[list[str], dict[str, Any]]:
    """The parts DIR ``out`` holds and their fields as ``result_type``'s, after checking that it is a partial
    assess of the same inputs as ``config``."""
    path = out / "assess.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        raise DraftlabError("--resume needs the folder an interrupted assess left, with its assess.json; give "
                            "that folder as --out", path=out) from None
    if not str(doc.get("format", "")).startswith("draftlab-assess/") or not doc.get("missing"):
        raise DraftlabError("is a finished assess (nothing missing); --resume finishes an interrupted one", path=out)
    mine = doc.get("config") or {}
    differ = [k for k in INPUTS if mine.get(k) != config.get(k)]
    if differ:
        raise DraftlabError(f"was assessed with --{differ[0].replace('_', '-')} {mine.get(differ[0])!r}, not "
                            f"{config.get(differ[0])!r}; resume with the options of the interrupted run", path=out)
    done = [p for p in PARTS if p in (doc.get("finished") or [])]
    hints = typing.get_type_hints(result_type)
    fields = {name: from_jsonable(hints[name], doc.get(name)) for part in done for name in HOLDS[part]
              if name != "profile"}
    return done, fields


def from_jsonable(hint: Any, value: Any) -> Any:
    """``value`` (as :func:`draftlab.documents.to_jsonable` wrote it) read back as type ``hint``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if value is None or hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        return from_jsonable(next(a for a in args if a is not type(None)), value)
    if dataclasses.is_dataclass(hint):
        inner = typing.get_type_hints(hint)
        return hint(**{f.name: from_jsonable(inner[f.name], value[f.name]) for f in dataclasses.fields(hint)
                       if f.name in value and f.name != "provenance"})
    if origin in (list, tuple):
        items = [from_jsonable(args[0] if args else Any, v) for v in value]
        return items if origin is list else tuple(items)
    if origin is dict:
        return {from_jsonable(args[0], k): from_jsonable(args[1], v) for k, v in value.items()}
    if hint in (int, float, Path):
        return hint(value)
    return value
