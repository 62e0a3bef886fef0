"""The greedy decode loop replayed over a known continuation, and the probe's acceptance figures.

:func:`decoder_walk` follows :meth:`draftlab.decode.decoder.SpeculativeDecoder.stream` step by step:
the prefill commits the first continuation token; each cycle rooted at the last committed token
commits its accepted drafts plus the bonus; the list is trimmed to ``max_new_tokens`` and at EOS,
while the accept length counts the whole cycle; no cycle starts whose verify would pass the
context. Accept lengths are counted by :mod:`draftlab.decode.metrics`, the one place for that.
"""

from __future__ import annotations

from collections.abc import Sequence

from draftlab.decode.metrics import accept_stats


def decoder_walk(accepted: Sequence[int], tokens: Sequence[int], prompt_len: int, max_new_tokens: int, *,
                 steps: int, eos: set[int], context: int | None) -> list[int]:
    """Accept lengths of the cycles greedy speculative decoding runs to produce ``max_new_tokens``.

    ``tokens`` = prompt + continuation (+ look-ahead); ``accepted[s]`` = drafts a cycle rooted at
    position s + 1 accepts. Needs ``len(tokens) >= prompt_len + max_new_tokens``.
    """
    lengths: list[int] = []
    produced = 1
    if tokens[prompt_len] in eos:
        return lengths
    while produced < max_new_tokens:
        root = prompt_len + produced - 1
        if context is not None and root + steps + 1 > context:
            break
        length = int(accepted[root - 1]) + 1
        committed = tokens[root + 1:root + 1 + length][:max_new_tokens - produced]
        lengths.append(length)
        produced += len(committed)
        if any(t in eos for t in committed):
            break
    return lengths


def cycle_roots(prompt_len: int, accept_lengths: Sequence[int]) -> list[int]:
    """The root position of each cycle of a :func:`decoder_walk`: the first at ``prompt_len`` (the
    token the prefill committed), each next one past the tokens the cycle before committed (only the
    last cycle's commit is ever cut short, so the lengths give the roots)."""
    roots, root = [], prompt_len
    for length in accept_lengths:
        roots.append(root)
        root += length
    return roots


def acceptance_by_step(accept_lengths: Sequence[int], steps: int) -> list[float | None]:
    """P(draft j accepted | drafts before j accepted), j = 1..steps; None where no cycle got that far."""
    out: list[float | None] = []
    for j in range(1, steps + 1):
        reached = sum(1 for n in accept_lengths if n - 1 >= j - 1)
        passed = sum(1 for n in accept_lengths if n - 1 >= j)
        out.append(passed / reached if reached else None)
    return out


def histogram_list(accept_lengths: Sequence[int], steps: int) -> list[int]:
    """Cycles per accept length, index = accept length (0 .. steps + 1; index 0 is always 0)."""
    counts = accept_stats(accept_lengths).histogram
    return [counts.get(i, 0) for i in range(steps + 2)]


def per_position_lengths(accepted: Sequence[int], prompt_len: int, max_new_tokens: int) -> list[int]:
    """Accept length of a cycle rooted at every committed continuation token that has a successor
    (the teacher-forced figure training logs report)."""
    roots = range(prompt_len, prompt_len + max_new_tokens - 1)
    return [int(accepted[r - 1]) + 1 for r in roots]
