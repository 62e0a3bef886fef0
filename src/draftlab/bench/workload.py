"""Benchmark prompts and the request body each API expects for them.

Prompts come from a JSONL file, one object per line, with one of ``prompt`` (text), ``messages``
(a chat, ``[{"role", "content"}]``) or ``input_ids`` (token ids), the same rows ``draftlab
generate`` reads. No tokenizer is needed: the server applies its own chat template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draftlab import jsonio
from draftlab.decode.prompts import surrogate_error
from draftlab.errors import DraftlabError
from draftlab.readable import regular_file

APIS = ("openai-chat", "openai", "sglang")
API_PATHS = {"openai-chat": "/v1/chat/completions", "openai": "/v1/completions", "sglang": "/generate"}


@dataclass(frozen=True)
class Prompt:
    """One row of a prompts file: exactly one of the three fields is set."""

    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    input_ids: list[int] | None = None


def load_prompts(path: str | Path) -> list[Prompt]:
    """Read a prompts JSONL file; every bad row is reported by line number."""
    path = Path(path)
    regular_file(path, "prompts file not found; give a JSONL file with prompt/messages/input_ids rows")
    prompts = []
    for lineno, line in enumerate(_lines(path), start=1):
        if not line.strip():
            continue
        try:
            row = jsonio.loads(line)
        except json.JSONDecodeError as exc:
            raise DraftlabError(f"line {lineno} is not valid JSON ({exc.msg}); one JSON object per line", path=path) from None
        if (bad := surrogate_error(row, f"line {lineno}")) is not None:
            raise DraftlabError(bad, path=path)
        prompts.append(_prompt_from_row(row, path, lineno))
    if not prompts:
        raise DraftlabError("no prompts; add rows like {\"prompt\": \"...\"}", path=path)
    return prompts


def _lines(path: Path) -> list[str]:
    """The file's lines; bytes that are not UTF-8 are one error naming the line, not a traceback."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DraftlabError(f"line {line} is not UTF-8 (byte 0x{data[exc.start]:02x}); save the file as UTF-8",
                            path=path) from None


def _prompt_from_row(row: Any, path: Path, lineno: int) -> Prompt:
    where = f"line {lineno}"
    if not isinstance(row, dict):
        raise DraftlabError(f"{where} is not a JSON object", path=path)
    if isinstance(row.get("prompt"), str):
        return Prompt(text=row["prompt"])
    messages = row.get("messages")
    if isinstance(messages, list) and messages and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages
    ):
        return Prompt(messages=messages)
    ids = row.get("input_ids")
    if isinstance(ids, list) and ids and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        return Prompt(input_ids=ids)
    raise DraftlabError(
        f"{where} needs one of: \"prompt\" (string), \"messages\" (list of {{role, content}}), "
        "\"input_ids\" (non-empty list of token ids)",
        path=path,
    )


def check_prompts_fit(api: str, prompts: list[Prompt]) -> None:
    """Refuse prompts the chosen API cannot carry, before any request is sent."""
    for i, p in enumerate(prompts):
        if api == "openai-chat" and p.messages is None and p.text is None:
            raise DraftlabError(f"prompt {i} has input_ids, which the chat API cannot take; use --api openai or sglang")
        if api in ("openai", "sglang") and p.messages is not None:
            raise DraftlabError(f"prompt {i} is a chat (messages); use --api openai-chat, or give prompt text")


def request_body(
    api: str, prompt: Prompt, *, model: str | None, max_tokens: int, temperature: float, ignore_eos: bool
) -> dict[str, Any]:
    """The streaming request for ``prompt`` in ``api``'s format (usage requested on the last chunk)."""
    if api == "sglang":
        body: dict[str, Any] = {"input_ids": prompt.input_ids} if prompt.input_ids else {"text": prompt.text}
        body["sampling_params"] = {"max_new_tokens": max_tokens, "temperature": temperature, "ignore_eos": ignore_eos}
        body["stream"] = True
        return body
    body = {"model": model, "max_tokens": max_tokens, "temperature": temperature, "ignore_eos": ignore_eos}
    if api == "openai-chat":
        body["messages"] = prompt.messages or [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.input_ids if prompt.input_ids else prompt.text
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    return body
