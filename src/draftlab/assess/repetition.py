"""How much of the target's continuations repeats text that came before them.

Model-free methods (n-gram prompt lookup, suffix decoding) draft by copying: they win where the text
repeats itself. A small model's greedy continuations loop (the toy target's do), which real chat
traffic rarely does, so ``assess`` says how repetitive its data was whenever a model-free method wins
on it, rather than advising one in general.
"""

from __future__ import annotations

from collections.abc import Sequence

SPAN = 4  # a token repeats when it and the SPAN - 1 tokens before it already appeared together earlier


def repetition(prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> float | None:
    """The share of continuation tokens whose last-:data:`SPAN`-token window already occurred earlier in the
    same sequence (prompt and continuation so far); None without continuation tokens."""
    repeated = total = 0
    for prompt, continuation in zip(prompts, continuations):
        tokens = [*prompt, *continuation]
        seen = {tuple(tokens[i - SPAN:i]) for i in range(SPAN, len(prompt) + 1)}
        for end in range(len(prompt) + 1, len(tokens) + 1):
            window = tuple(tokens[end - SPAN:end]) if end >= SPAN else None
            total += 1
            if window is not None:
                repeated += window in seen
                seen.add(window)
    return repeated / total if total else None
