"""Prompts files: JSONL, one prompt a line, as token ids, text or chat messages.

Each row is an object with exactly one of ``input_ids`` (a list of token ids: no tokenizer needed),
``prompt`` (text, tokenized with the target's tokenizer) or ``messages`` (a chat, rendered with the
target tokenizer's chat template and a generation prompt). Blank lines are skipped. A row may also
carry a ``category`` (a string, e.g. a SPEED-Bench category); :func:`read_categories` reads only those,
without a tokenizer (``probe --profile-out``'s per-category figures).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draftlab import jsonio
from draftlab.errors import DraftlabError
from draftlab.readable import regular_file

KINDS = ("input_ids", "prompt", "messages")


@dataclass(frozen=True)
class Prompt:
    line: int  # 1-based line in the file
    input_ids: list[int]
    category: str | None = None  # the row's optional "category" (code, chat, agent ...), for per-slice figures


def read_prompts(path: str | Path, *, tokenizer_dir: str | Path, vocab_size: int) -> list[Prompt]:
    """Every prompt of ``path`` as token ids; the tokenizer is loaded only if a row needs it."""
    path = Path(path)
    try:
        lines = regular_file(path, "prompts file not found").read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DraftlabError(f"cannot read prompts file ({exc})", path=path) from None
    tokenizer = None
    prompts = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"{path}:{number}"
        row = _parse_row(text, where)
        kind = next(k for k in KINDS if k in row)
        if kind == "input_ids":
            ids = row["input_ids"]
            if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                raise DraftlabError(f"{where}: input_ids must be a list of integers")
        else:
            tokenizer = tokenizer or _load_tokenizer(tokenizer_dir, where)
            ids = _tokenize(tokenizer, kind, row[kind], where)
        if not ids:
            raise DraftlabError(f"{where}: the prompt is empty; give at least one token")
        bad = next((i for i in ids if not 0 <= i < vocab_size), None)
        if bad is not None:
            raise DraftlabError(f"{where}: token id {bad} is outside the target's vocabulary (0..{vocab_size - 1})")
        prompts.append(Prompt(number, ids, _category(row, where)))
    if not prompts:
        raise DraftlabError("the prompts file has no prompts; write one JSON object a line", path=path)
    return prompts


def read_categories(path: str | Path) -> list[str | None]:
    """Each prompt's ``category`` (None where a row has none), in the order :func:`read_prompts` returns them."""
    path = Path(path)
    try:
        lines = regular_file(path, "prompts file not found").read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DraftlabError(f"cannot read prompts file ({exc})", path=path) from None
    out: list[str | None] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"{path}:{number}"
        out.append(_category(_parse_row(text, where), where))
    return out


def _category(row: dict[str, Any], where: str) -> str | None:
    category = row.get("category")
    if category is not None and not isinstance(category, str):
        raise DraftlabError(f"{where}: category must be a string, e.g. \"code\"")
    return category


def _parse_row(text: str, where: str) -> dict[str, Any]:
    try:
        row = jsonio.loads(text)
    except json.JSONDecodeError as exc:
        raise DraftlabError(f"{where}: invalid JSON ({exc.msg}); write one JSON object a line") from None
    kinds = [k for k in KINDS if isinstance(row, dict) and k in row]
    if len(kinds) != 1:
        raise DraftlabError(f"{where}: a row needs exactly one of {', '.join(KINDS)}")
    if (bad := surrogate_error(row, where)) is not None:
        raise DraftlabError(bad)
    return row


def surrogate_error(value: Any, where: str) -> str | None:
    """One line for a row holding a lone surrogate (``where``: the file and line), or None."""
    found = jsonio.lone_surrogate(value)
    return None if found is None else f"{where}: the row {jsonio.surrogate_says(found)}"


def _load_tokenizer(folder: str | Path, where: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise DraftlabError(
            f"{where}: needs the target's tokenizer but {folder} has none that loads ({type(exc).__name__}); "
            "give input_ids rows instead"
        ) from None


def _tokenize(tokenizer: Any, kind: str, value: Any, where: str) -> list[int]:
    if kind == "prompt":
        if not isinstance(value, str):
            raise DraftlabError(f"{where}: prompt must be a string")
        return list(tokenizer(value)["input_ids"])
    if not isinstance(value, list) or not all(isinstance(m, dict) and "role" in m and "content" in m for m in value):
        raise DraftlabError(f"{where}: messages must be a list of {{\"role\", \"content\"}} objects")
    if not getattr(tokenizer, "chat_template", None):
        raise DraftlabError(f"{where}: the target's tokenizer has no chat template; give prompt or input_ids rows")
    text = tokenizer.apply_chat_template(value, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
