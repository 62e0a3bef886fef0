"""Which tokens of a chat-templated conversation are the assistant's, as drafter training counts them.

SpecForge renders the whole conversation with the chat template, tokenizes it once and puts
``loss_mask = 1`` on the tokens of each assistant reply, end-of-turn marker included. We do the
same with the tokenizer's own template, two ways:

- a template with ``{% generation %}`` blocks marks the assistant text itself; transformers
  returns that mask (``return_assistant_tokens_mask=True``);
- otherwise the reply's character span is found by rendering prefixes: the reply of message j
  starts where ``render(messages[:j], add_generation_prompt=True)`` ends and stops where
  ``render(messages[:j+1])`` ends, trailing whitespace after the end-of-turn marker excluded.
  When a template renders history differently from the last turn (e.g. dropping reasoning),
  the reply is located by its content text instead. A token belongs to the reply when its first
  character lies in the span.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from draftlab.vocab.rows import BadRow

_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


def template_text(tokenizer: Any) -> str | None:
    """The tokenizer's default chat template, or None when it has none."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) and template.strip() else None


def has_generation_blocks(template: str) -> bool:
    return bool(_GENERATION_TAG.search(template))


def render(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    except Exception as exc:  # jinja raises anything a template's raise_exception() chooses
        raise BadRow(f"the chat template refused this conversation ({exc})") from None


def assistant_char_spans(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character span of each assistant reply in it."""
    full = render(tokenizer, messages, False)
    spans: list[tuple[int, int]] = []
    cursor = 0
    for j, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = render(tokenizer, messages[:j], True) if j else ""
        upto = render(tokenizer, messages[: j + 1], False).rstrip()
        if prompt and upto.startswith(prompt) and full.startswith(upto) and len(prompt) >= cursor:
            start, end = len(prompt), len(upto)
        else:
            content = message["content"]
            if not content:
                continue
            start = full.find(content, cursor)
            if start < 0:
                raise BadRow(f"the chat template does not render assistant message {j} verbatim; "
                             "its tokens cannot be located")
            end = start + len(content)
        if end > start:
            spans.append((start, end))
        cursor = end
    return full, spans


def span_mask(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> np.ndarray:
    """Bool per token: does the token's first character lie in one of ``spans``?"""
    starts = np.fromiter((o[0] for o in offsets), dtype=np.int64, count=len(offsets))
    mask = np.zeros(len(offsets), dtype=bool)
    for start, end in spans:
        mask |= (starts >= start) & (starts < end)
    return mask


def generation_mask(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """Token ids and assistant mask from a template with ``{% generation %}`` blocks."""
    try:
        out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
    except Exception as exc:
        raise BadRow(f"the chat template refused this conversation ({exc})") from None
    return list(out["input_ids"]), list(out["assistant_masks"])
