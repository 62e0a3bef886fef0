"""The text the probe walks over: the target's own continuations (greedy, or sampled at temperature > 0),
or responses given in the data.

Greedy continuations are decoded in batches (left-padded, one KV cache) and run past EOS: the
reference decoder counts a cycle's full accept length even when it commits tokens after an EOS or
past ``max_new_tokens``, so the walk needs the target's greedy tokens a few steps beyond both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import DynamicCache

from draftlab.errors import DraftlabError
from draftlab.models.target import TargetRunner


@torch.no_grad()
def target_continuations(runner: TargetRunner, prompts: list[list[int]], num_tokens: int, *, batch_size: int,
                         temperature: float = 0.0, seed: int | None = None,
                         advance: Callable[[int], None] = lambda n: None) -> list[list[int]]:
    """``num_tokens`` tokens after each prompt, greedy (temperature 0) or sampled; EOS does not stop them."""
    gen = torch.Generator(device=runner.device)
    gen.manual_seed(seed) if seed is not None else gen.seed()
    out: list[list[int]] = []
    for start in range(0, len(prompts), batch_size):
        out += _decode_batch(runner, prompts[start:start + batch_size], num_tokens, temperature, gen)
        advance(len(prompts[start:start + batch_size]))
    return out


def _decode_batch(runner: TargetRunner, prompts: list[list[int]], num_tokens: int, temperature: float,
                  gen: torch.Generator) -> list[list[int]]:
    device = runner.device
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):  # left padding: every row's next token is the last column
        ids[row, width - len(prompt):] = torch.tensor(prompt, device=device)
        mask[row, width - len(prompt):] = 1
    cache = DynamicCache()
    generated = []
    step_ids = ids
    for _ in range(num_tokens):
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1]:]
        logits = runner.model(input_ids=step_ids, attention_mask=mask, position_ids=positions,
                              **{runner.cache_arg: cache},
                              use_cache=True, logits_to_keep=1).logits[:, -1]
        if temperature == 0:
            step_ids = logits.argmax(-1, keepdim=True)
        else:
            step_ids = torch.multinomial(torch.softmax(logits.float() / temperature, -1), 1, generator=gen)
        generated.append(step_ids)
        mask = torch.cat([mask, torch.ones_like(step_ids)], dim=1)
    return torch.cat(generated, dim=1).tolist()


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
