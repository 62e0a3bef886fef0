"""What one streamed chunk says, per API: did output arrive, how many tokens so far, any usage.

Token counts come only from what the server reports (``usage.completion_tokens`` on the final
chunk for the OpenAI APIs, the cumulative ``meta_info.completion_tokens`` on SGLang's
``/generate``), never from counting chunks: under speculation one chunk carries every token a
verify cycle committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class MalformedStream(Exception):
    """A streamed payload that is not what the API promises."""


@dataclass
class StreamState:
    """What a request's stream has told us so far."""

    output_chunks: int = 0  # chunks that carried output
    completion_tokens: int | None = None
    meta: dict[str, Any] | None = None  # SGLang meta_info of the last chunk
    done: bool = False  # saw [DONE]


def read_chunk(api: str, payload: str, state: StreamState) -> bool:
    """Apply one SSE ``data`` payload to ``state``; True when it carried new output."""
    if payload == "[DONE]":
        state.done = True
        return False
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError:
        raise MalformedStream(f"chunk is not JSON: {payload[:80]!r}") from None
    if not isinstance(obj, dict):
        raise MalformedStream(f"chunk is not a JSON object: {payload[:80]!r}")
    if "error" in obj:
        raise MalformedStream(f"server error in stream: {str(obj['error'])[:120]}")
    if api == "sglang":
        return _read_sglang(obj, state)
    return _read_openai(api, obj, state)


def _read_openai(api: str, obj: dict[str, Any], state: StreamState) -> bool:
    usage = obj.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        state.completion_tokens = usage["completion_tokens"]
    choices = obj.get("choices")
    if not isinstance(choices, list):
        raise MalformedStream("chunk has no 'choices' list")
    new_output = False
    for choice in choices:
        if not isinstance(choice, dict):
            raise MalformedStream("a choice is not an object")
        if api == "openai-chat":
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content")
        else:
            text = choice.get("text")
        new_output = new_output or bool(text)
    if new_output:
        state.output_chunks += 1
    return new_output


def _read_sglang(obj: dict[str, Any], state: StreamState) -> bool:
    meta = obj.get("meta_info")
    if not isinstance(meta, dict) or not isinstance(meta.get("completion_tokens"), int):
        raise MalformedStream("chunk has no meta_info.completion_tokens")
    before = state.completion_tokens or 0
    state.completion_tokens = meta["completion_tokens"]
    state.meta = meta
    if state.completion_tokens > before:
        state.output_chunks += 1
        return True
    return False
