"""``json.loads`` for files that strangers publish: every way a document can fail is a JSONDecodeError.

The standard parser raises more than JSONDecodeError on hostile input: RecursionError for deep
nesting (``[[[[...``), ValueError for an integer of more than 4300 digits. Readers catch
JSONDecodeError to turn it into one DraftlabError line; this keeps those two from escaping as tracebacks.
:func:`read` is that line for draftlab's own JSON files (profiles, probe results, plans, schedules,
bench results): the one reader each of them goes through before checking what the document holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from draftlab.errors import DraftlabError
from draftlab.readable import regular_file


def loads(text: str | bytes) -> Any:
    """Parse ``text``; raise :class:`json.JSONDecodeError` (its ``msg`` says what is wrong) on any failure."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text if isinstance(text, str) else "", 0) from None
    except ValueError as exc:  # an integer too long to convert; bytes that are not UTF-8
        raise json.JSONDecodeError(str(exc), text if isinstance(text, str) else "", 0) from None


def lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in the strings (keys included) of a parsed JSON value, as its escape
    (``\\ud800``), or None. JSON may spell one (``"\\ud800"`` parses), but it is half of a UTF-16 pair and no
    character: no tokenizer can take it and no request body can carry it, so readers of text refuse it."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"\\u{ord(value[exc.start]):04x}"
        return None
    if isinstance(value, dict):
        return next((s for k, v in value.items() for s in (lone_surrogate(k), lone_surrogate(v)) if s), None)
    if isinstance(value, list):
        return next((s for v in value if (s := lone_surrogate(v))), None)
    return None


def surrogate_says(found: str) -> str:
    """What is wrong with text holding the lone surrogate ``found``, and what to do, for a reader's line."""
    return (f"holds a lone surrogate ({found}), half of a UTF-16 pair and no character, which no tokenizer or "
            "server can encode; remove it or write the whole character")


def read(path: str | Path, missing: str = "not found", *, option: str = "") -> Any:
    """The parsed JSON file ``path``; one DraftlabError line when it cannot be. ``missing`` is the line for a
    path with nothing there (say how to write one); ``option`` (``--schedule``), when given, leads the
    line for a file that is there but cannot be read or parsed."""
    try:
        return loads(regular_file(path, missing).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        lead = f"{option}: " if option else ""
        raise DraftlabError(f"{lead}not a readable JSON file ({exc})", path=path) from None
