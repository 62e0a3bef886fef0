"""The shapes of the JSON documents draftlab writes, as key paths, against ``json_shapes.json``: nothing renamed
or removed (keys may be added). It covers what ``tests/cli/interface.py`` cannot: documents assembled by hand
(assess.json's verdict, PROFILE.json, check's deployment), not printed from a result dataclass.

A path joins keys with ``.``; a list's items share ``[]``; keys that are data rather than names (batch sizes,
config labels like ``3/1/4``, ``1k-2k``, the prompts' categories) are ``*``. Paths stop at :data:`DEPTH` keys.

After a deliberate change: ``DRAFTLAB_UPDATE_SHAPES=1 python -m pytest tests -k json_shape`` rewrites the
snapshot of the documents those tests produce (review the diff: a removed path breaks someone's reader).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).parent / "json_shapes.json"
DEPTH = 4
NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")
DATA_KEYED = {"category"}  # maps keyed by the user's data (prompt categories), whatever the keys look like


def key_paths(doc: Any, prefix: str = "", depth: int = 0) -> set[str]:
    """Every key path of ``doc`` up to :data:`DEPTH` keys deep."""
    paths: set[str] = set()
    if isinstance(doc, dict) and depth < DEPTH:
        data = prefix.rsplit(".", 1)[-1] in DATA_KEYED
        for key, value in doc.items():
            path = f"{prefix}.{key if NAME.match(key) and not data else '*'}".lstrip(".")
            paths.add(path)
            paths |= key_paths(value, path, depth + 1)
    elif isinstance(doc, list):
        for item in doc:
            paths |= key_paths(item, f"{prefix}[]", depth)
    return paths


def assert_shape(name: str, doc: dict[str, Any]) -> None:
    """``doc`` has every key path the snapshot recorded for ``name`` (with DRAFTLAB_UPDATE_SHAPES=1: record it)."""
    recorded = json.loads(SNAPSHOT.read_text()) if SNAPSHOT.is_file() else {}
    live = key_paths(doc)
    if os.environ.get("DRAFTLAB_UPDATE_SHAPES"):
        recorded[name] = sorted(live)
        SNAPSHOT.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
        return
    assert name in recorded, f"no recorded shape for {name!r}: run with DRAFTLAB_UPDATE_SHAPES=1 once"
    missing = sorted(set(recorded[name]) - live)
    assert not missing, f"{name}: JSON keys gone (renamed or removed): {missing}"
