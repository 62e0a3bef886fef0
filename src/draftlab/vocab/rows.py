"""The JSONL row kinds ``vocab count`` reads, normalised to one shape.

- OpenAI: ``{"messages": [{"role", "content"}, ...]}``
- ShareGPT: ``{"conversations": [{"from", "value"}, ...]}`` (``role``/``content`` items accepted
  too, as SpecForge writes them); ``human``/``gpt`` become ``user``/``assistant``
- plain text: ``{"text": "..."}``
- pre-tokenized: ``{"input_ids": [...]}``, with an optional same-length ``loss_mask`` of 0/1
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from draftlab import jsonio

ROW_KINDS = ("messages", "conversations", "text", "input_ids")
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
                   "assistant": "assistant", "system": "system"}


class BadRow(ValueError):
    """A line that cannot be counted; the message says why (the caller adds file and line)."""


@dataclass(frozen=True)
class Row:
    kind: str  # one of ROW_KINDS
    messages: list[dict[str, str]] | None = None  # role/content, for the two conversation kinds
    text: str | None = None
    input_ids: list[int] | None = None
    loss_mask: list[int] | None = None


def parse_row(line: str) -> Row:
    """One JSONL line as a :class:`Row`; raises :class:`BadRow` when it is not one of the kinds."""
    try:
        obj = jsonio.loads(line)
    except json.JSONDecodeError as exc:
        raise BadRow(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise BadRow("a row must be a JSON object")
    if (found := jsonio.lone_surrogate(obj)) is not None:
        raise BadRow(f"the row {jsonio.surrogate_says(found)}")
    if "messages" in obj:
        return Row("messages", messages=_messages(obj["messages"], "messages"))
    if "conversations" in obj:
        return Row("conversations", messages=_messages(obj["conversations"], "conversations"))
    if "text" in obj:
        if not isinstance(obj["text"], str):
            raise BadRow("'text' must be a string")
        return Row("text", text=obj["text"])
    if "input_ids" in obj:
        return _pretokenized(obj)
    raise BadRow(f"has none of the keys {', '.join(ROW_KINDS)}")


def _messages(items: Any, key: str) -> list[dict[str, str]]:
    if not isinstance(items, list) or not items:
        raise BadRow(f"'{key}' must be a non-empty list of messages")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadRow(f"{key}[{i}] is not an object")
        if "from" in item:
            role = _SHAREGPT_ROLES.get(str(item["from"]).lower(), str(item["from"]))
            content = item.get("value")
        elif "role" in item:
            role, content = str(item["role"]), item.get("content")
        else:
            raise BadRow(f"{key}[{i}] has neither 'role' nor 'from'")
        out.append({"role": role, "content": _content_text(content, f"{key}[{i}]")})
    return out


def _content_text(content: Any, where: str) -> str:
    """A message's text: a string, null (tool-call turns) or a list of ``{"type": "text"}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    raise BadRow(f"{where} content must be a string or a list of text parts")


def _pretokenized(obj: dict[str, Any]) -> Row:
    ids = obj["input_ids"]
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise BadRow("'input_ids' must be a list of integers")
    mask = obj.get("loss_mask")
    if mask is not None:
        if not isinstance(mask, list) or len(mask) != len(ids) or not all(m in (0, 1) for m in mask):
            raise BadRow(f"'loss_mask' must be a list of {len(ids)} zeros and ones, like input_ids")
    return Row("input_ids", input_ids=ids, loss_mask=mask)
