"""``json.loads`` for files that strangers publish: every way a document can fail is a JSONDecodeError.

The standard parser raises more than JSONDecodeError on hostile input: RecursionError for deep
nesting (``[[[[...``), ValueError for an integer of more than 4300 digits. Readers catch
JSONDecodeError to turn it into one DraftlabError line; this keeps those two from escaping as tracebacks.
"""

from __future__ import annotations

import json
from typing import Any


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
