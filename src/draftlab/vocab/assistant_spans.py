"""Which tokens of a chat-templated conversation are the assistant's, as drafter training counts them.

SpecForge renders the whole conversation with the chat template, tokenizes it once and puts
``loss_mask = 1`` on the tokens of each assistant reply, end-of-turn marker included. We do the
same with the tokenizer's own template, in three ways:

- a template with ``{% generation %}`` blocks marks the assistant text itself; transformers
  returns that mask (``return_assistant_tokens_mask=True``);
- otherwise the reply's character span is found by rendering prefixes: the reply of message j
  starts where ``render(messages[:j], add_generation_prompt=True)`` ends and stops where
  ``render(messages[:j+1])`` ends, trailing whitespace after the end-of-turn marker excluded;
- a template that renders a reply differently once later turns follow (Qwen3 drops the reasoning
  of earlier turns) breaks that prefix property; then the conversation is rendered again with
  reply j replaced by a sentinel, and the reply is whatever the real rendering holds between the
  text before and after the sentinel, plus the end-of-turn marker the template writes after it.

A token belongs to the reply when its first character lies in the span.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from draftlab.vocab.rows import BadRow

_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
SENTINEL = "\ue000draftlab-reply\ue001"  # private-use characters: in no template and no real reply


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
        span = _span_by_prefix(tokenizer, messages, j, full) or _span_by_sentinel(tokenizer, messages, j, full)
        if span is None or span[0] < cursor:
            raise BadRow(f"cannot locate assistant message {j} in the chat template's rendering")
        if span[1] > span[0]:
            spans.append(span)
            cursor = span[1]
    return full, spans


def _span_by_prefix(tokenizer: Any, messages: list[dict[str, str]], j: int, full: str) -> tuple[int, int] | None:
    """Reply j lies between the generation prompt after messages[:j] and the end of messages[:j+1]."""
    if j == 0:
        return None
    prompt = render(tokenizer, messages[:j], True)
    upto = render(tokenizer, messages[: j + 1], False).rstrip()
    if len(upto) > len(prompt) and upto.startswith(prompt) and full.startswith(upto):
        return len(prompt), len(upto)
    return None


def _span_by_sentinel(tokenizer: Any, messages: list[dict[str, str]], j: int, full: str) -> tuple[int, int] | None:
    """Reply j is what the template wrote where a sentinel stands when the reply is replaced by it."""
    probe = [*messages[:j], {**messages[j], "content": SENTINEL}, *messages[j + 1:]]
    text = render(tokenizer, probe, False)
    at = text.find(SENTINEL)
    if at < 0:
        return None
    before, after = text[:at], text[at + len(SENTINEL):]
    if len(before) + len(after) > len(full) or not (full.startswith(before) and full.endswith(after)):
        return None
    start, end = len(before), len(full) - len(after)
    last = render(tokenizer, probe[: j + 1], False)
    marker = last[last.find(SENTINEL) + len(SENTINEL):].rstrip()  # the end-of-turn marker
    if marker and after.startswith(marker):
        end += len(marker)
    return start, end


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
