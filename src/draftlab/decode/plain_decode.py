"""Plain (draft-free) decoding of B prompts at once: the one loop the probe's continuations,
``train regenerate``, ``generate --no-draft --batch-size`` and the server's K = 0 batches run.

One left-padded prefill on a :class:`~draftlab.models.target_batch.BatchTarget`, then
:meth:`~draftlab.models.target_batch.BatchTarget.decode` in chunks: every step stays on the device (a
graph replay per step on CUDA), and the host reads the tokens back only between chunks, when it needs
them: to stop at EOS or to stream them (``on_tokens``: every step). Without either, the tokens are
read once, at the end. Each row ends at ``max_new_tokens``, at its first EOS (included), or where
its next token would need a position past the target's context (what the speculative decoders do);
the batch runs until its last row ends, the finished rows riding along and their extra tokens dropped.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from draftlab.decode.decoder import trim_commit
from draftlab.models.batch_slots import left_pad
from draftlab.models.target_batch import BatchTarget, pick_next

CHECK_EVERY = 16  # decode steps between reads of the tokens when stopping at EOS


def plain_decode(target: BatchTarget, prompts: list[list[int]], max_new_tokens: int, *, temperature: float = 0.0,
                 gen: torch.Generator | None = None, eos: set[int] | frozenset[int] = frozenset(),
                 on_tokens: Callable[[int, list[int]], None] | None = None,
                 check_every: int = CHECK_EVERY) -> list[list[int]]:
    """Up to ``max_new_tokens`` tokens after each of ``prompts`` (one row of ``target`` each, which is
    reset first): greedy at temperature 0, else sampled with ``gen``. ``on_tokens(row, tokens)``
    hears each row's tokens as they are read back, every step."""
    target.reset()
    ids, positions, valid = left_pad(prompts, target.device)
    limit = target.config.max_position_embeddings
    caps = [max_new_tokens if limit is None else min(max_new_tokens, limit - len(p) + 1) for p in prompts]
    prefill = target.forward(ids, positions, new_valid=valid, last_only=True, max_position=ids.shape[1] - 1)
    tokens = pick_next(prefill.logits[:, -1], temperature, gen)
    position = positions[:, -1:] + 1 if limit is None else (positions[:, -1:] + 1).clamp(max=limit - 1)
    rows: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    every = 1 if on_tokens is not None else check_every if eos else None
    chunks, remaining = [tokens], max(caps) - 1

    def read_back() -> None:
        _commit(rows, done, torch.cat(chunks, dim=1).tolist(), caps, eos, on_tokens)
        chunks.clear()

    if on_tokens is not None:  # the prefill's token is heard at once
        read_back()
    while remaining and not all(done):
        steps = remaining if every is None else min(every, remaining)
        chunks.append(target.decode(tokens, position, steps, temperature=temperature, gen=gen))
        tokens, position, remaining = chunks[-1][:, -1:], position + steps, remaining - steps
        if limit is not None:
            position = position.clamp(max=limit - 1)
        if every is not None:
            read_back()
    if chunks:
        read_back()
    return rows


def _commit(rows: list[list[int]], done: list[bool], new: list[list[int]], caps: list[int], eos: set[int],
            on_tokens: Callable[[int, list[int]], None] | None) -> None:
    """Add each live row's new tokens, cut at its cap and after its first EOS."""
    for i, tokens in enumerate(new):
        if done[i]:
            continue
        tokens, stopped = trim_commit(tokens, caps[i] - len(rows[i]), eos)
        rows[i] += tokens
        done[i] = stopped or len(rows[i]) >= caps[i]
        if on_tokens is not None and tokens:
            on_tokens(i, tokens)
