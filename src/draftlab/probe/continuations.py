"""The text the probe walks over: the target's own continuations (greedy, or sampled at temperature > 0),
or responses given in the data.

Continuations are decoded in batches of left-padded prompts by
:func:`~draftlab.decode.plain_decode.plain_decode`, the loop ``generate --no-draft --batch-size`` runs,
on the batched target (:class:`~draftlab.models.target_batch.BatchTarget`): for the families it has
them, over one preallocated KV cache, each step (lm_head and argmax included) one CUDA graph replay
on CUDA with no host sync, reading the cache's filled part rounded up to a read bucket (one graph per
bucket); for others over HF's dynamic cache. So the runner's own mode (a target loaded for the static
runtime included) never matters here. Prompts are grouped by length (less padding) and every group
has the same batch size (the last one filled up with copies), so a group reuses the cache and graphs
of the one before; the layers' parts are compiled only when the groups' steps add up to enough to
pay for it (:func:`~draftlab.models.target_batch.compile_pays`: a regenerate, not a probe's 64
prompts). They run past EOS: the reference decoder counts a cycle's full accept length even when
it commits tokens after an EOS or past ``max_new_tokens``, so the walk needs the target's tokens a
few steps beyond both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from draftlab.decode.plain_decode import plain_decode
from draftlab.errors import DraftlabError
from draftlab.models.target import TargetRunner
from draftlab.models.target_batch import BatchTarget, compile_pays


@torch.inference_mode()
def target_continuations(runner: TargetRunner, prompts: list[list[int]], num_tokens: int, *, batch_size: int,
                         temperature: float = 0.0, seed: int | None = None,
                         advance: Callable[[int], None] = lambda n: None) -> list[list[int]]:
    """``num_tokens`` tokens after each prompt, greedy (temperature 0) or sampled; EOS does not stop them.
    A prompt near the target's context gets fewer: its tokens stop where the next would need a position
    past the context (the caller cuts each continuation to its prompt's room anyway)."""
    if not prompts or num_tokens < 1:
        return [[] for _ in prompts]
    gen = torch.Generator(device=runner.device)
    gen.manual_seed(seed) if seed is not None else gen.seed()
    width = min(batch_size, len(prompts))
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    longest = max(len(p) for p in prompts)
    groups = -(-len(prompts) // width)
    target = BatchTarget(runner, width, longest + num_tokens, compile=compile_pays(groups * num_tokens, runner.device))
    out: dict[int, list[int]] = {}
    for start in range(0, len(order), width):
        group = order[start:start + width]
        rows = [prompts[i] for i in group]
        rows += [rows[0]] * (width - len(rows))  # the same batch size: the cache and graphs are reused
        tokens = plain_decode(target, rows, num_tokens, temperature=temperature, gen=gen)
        out.update(zip(group, tokens))
        advance(len(group))
    return [out[i] for i in range(len(prompts))]


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
