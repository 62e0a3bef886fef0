"""The text the probe walks over: the target's own continuations (greedy, or sampled at temperature > 0),
or responses given in the data.

Continuations are decoded in batches of left-padded prompts, on the batched target
(:class:`~draftlab.models.target_batch.BatchTarget`): for the families it has them, over one
preallocated KV cache and, on CUDA, as CUDA graphs, the same passes ``generate --batch-size`` runs
(each step reads the whole cache, so one decode graph serves every step);
for others over HF's dynamic cache. So the runner's own mode (a target loaded for the static runtime
included) never matters here. Prompts are grouped by length (less padding) and every group has the
same batch size (the last one filled up with copies), so a group reuses the cache and graphs of the
one before. They run past EOS: the reference decoder counts a cycle's full accept length even when
it commits tokens after an EOS or past ``max_new_tokens``, so the walk needs the target's tokens a
few steps beyond both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from draftlab.errors import DraftlabError
from draftlab.models.batch_slots import left_pad
from draftlab.models.target import TargetRunner
from draftlab.models.target_batch import BatchTarget


@torch.inference_mode()
def target_continuations(runner: TargetRunner, prompts: list[list[int]], num_tokens: int, *, batch_size: int,
                         temperature: float = 0.0, seed: int | None = None,
                         advance: Callable[[int], None] = lambda n: None) -> list[list[int]]:
    """``num_tokens`` tokens after each prompt, greedy (temperature 0) or sampled; EOS does not stop them.
    A prompt closer than ``num_tokens`` to the target's context gets tokens past it that mean nothing:
    cut each continuation to the prompt's room."""
    if not prompts or num_tokens < 1:
        return [[] for _ in prompts]
    gen = torch.Generator(device=runner.device)
    gen.manual_seed(seed) if seed is not None else gen.seed()
    width = min(batch_size, len(prompts))
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    capacity = max(len(p) for p in prompts) + num_tokens
    target = BatchTarget(runner, width, capacity, read_bucket=capacity)  # one read width: one graph per shape
    out: dict[int, list[int]] = {}
    for start in range(0, len(order), width):
        group = order[start:start + width]
        rows = [prompts[i] for i in group]
        rows += [rows[0]] * (width - len(rows))  # the same batch size: the cache and graphs are reused
        tokens = _decode_group(target, rows, num_tokens, temperature, gen)
        out.update(zip(group, tokens))
        advance(len(group))
    return [out[i] for i in range(len(prompts))]


def _decode_group(target: BatchTarget, prompts: list[list[int]], num_tokens: int, temperature: float,
                  gen: torch.Generator) -> list[list[int]]:
    """One left-padded prefill, then one token per row and step; the tokens stay on the device until the end."""
    target.reset()
    ids, positions, valid = left_pad(prompts, target.device)
    logits = target.forward(ids, positions, new_valid=valid, last_only=True).logits[:, -1]
    # a row that reaches the target's context keeps riding along at its last position: the tokens it
    # then gets are past what the caller may use (it cuts each row to its room) and affect no other row
    last = (target.config.max_position_embeddings or 1 << 62) - 1
    position = (positions[:, -1:] + 1).clamp(max=last)
    picked = []
    for step in range(num_tokens):
        next_ids = _pick(logits, temperature, gen)
        picked.append(next_ids)
        if step + 1 < num_tokens:
            logits = target.forward(next_ids, position, last_only=True).logits[:, -1]
            position = (position + 1).clamp(max=last)
    return torch.cat(picked, dim=1).tolist()


def _pick(logits: torch.Tensor, temperature: float, gen: torch.Generator) -> torch.Tensor:
    """[B, V] -> [B, 1]: the argmax (the first maximum) at temperature 0, else a sample of softmax(logits / T)."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    return torch.multinomial(torch.softmax(logits.float() / temperature, -1), 1, generator=gen)


def read_responses(path: str | Path, count: int, vocab_size: int) -> list[list[int]]:
    """``response_ids`` of each non-blank line of a prompts file (``--responses given``)."""
    path = Path(path)
    rows = [line for line in path.read_text().splitlines() if line.strip()]
    out = []
    for number, text in enumerate(rows, start=1):
        row = json.loads(text)
        ids = row.get("response_ids") if isinstance(row, dict) else None
        where = f"{path}: prompt {number}"
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise DraftlabError(f"{where}: --responses given needs a non-empty response_ids list of token ids "
                                "(the target's own output) on every row")
        bad = next((i for i in ids if not 0 <= i < vocab_size), None)
        if bad is not None:
            raise DraftlabError(f"{where}: response token {bad} is outside the target's vocabulary "
                                f"(0..{vocab_size - 1})")
        out.append(ids)
    if len(out) != count:
        raise DraftlabError(f"{path}: found {len(out)} responses for {count} prompts")
    return out
