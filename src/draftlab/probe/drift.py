"""``drift``: how far target B's hidden states and next-token choices have moved from target A's.

Both targets run the same token sequences (each prompt, plus its ``response_ids`` when the file has
them); every real position counts once. Hidden states are compared per layer in the canonical
convention (output of decoder layer k, before the final norm) with :mod:`.drift_metrics`. With a
drafter, the drafter's probe accept length on each target says what the drift costs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import Progress

from draftlab.checkpoint import TargetConfig, open_checkpoint
from draftlab.decode.prompts import read_prompts
from draftlab.engines.deployment import Deployment
from draftlab.errors import DraftlabError
from draftlab.models.devices import default_dtype
from draftlab.models.pair import NO_DEPLOYMENT, deployment_for
from draftlab.models.target import TargetRunner
from draftlab.probe.drift_metrics import HiddenDrift, LayerDrift, NextTokenDrift
from draftlab.probe.probe import Clock, check_room, probe


@dataclass
class DriftResult:
    config: dict[str, Any]
    layers: list[LayerDrift]  # layer, cosine, relative_l2, cka
    next_token_agreement: float  # share of positions where both targets' argmax agree
    kl: float  # mean KL(A || B) of the next-token distributions, nats
    num_positions: int
    accept_length_a: float | None = None  # the drafter's probe accept length on A (with a drafter)
    accept_length_b: float | None = None
    timings: dict[str, float] | None = None  # seconds: load_s, compare_s, probe_s (with a drafter), total_s


def drift(target_a: str | Path, target_b: str | Path, prompts: str | Path, *, layers: list[int] | None = None,
          drafter: str | Path | None = None, max_new_tokens: int = 128, steps: int | None = None,
          topk: int | None = None, num_draft_tokens: int | None = None, batch_size: int = 4,
          dtype: str | None = None, device: str = "cpu", deployment: Deployment | None = None,
          progress: bool = False) -> DriftResult:
    """Per-layer hidden-state drift and next-token drift of ``target_b`` against ``target_a``; with ``drafter``,
    at the aux layers ``deployment`` captures for it on ``target_a`` (default: the newest SGLang's) unless
    ``layers`` are given, and its accept length on both targets fed those layers."""
    dtype = dtype or default_dtype(device)
    cfg_a = TargetConfig.from_dict(open_checkpoint(target_a).config)
    cfg_b = TargetConfig.from_dict(open_checkpoint(target_b).config)
    for field in ("hidden_size", "num_layers", "vocab_size"):
        if getattr(cfg_a, field) != getattr(cfg_b, field):
            raise DraftlabError(f"{target_b}: {field} is {getattr(cfg_b, field)} but {target_a} has "
                                f"{getattr(cfg_a, field)}; drift compares versions of one architecture")
    if drafter is not None:
        deployment = deployment or deployment_for(target_a, drafter)
    if layers is None:
        layers = list(deployment.aux.layers) if drafter is not None else list(range(cfg_a.num_layers))
    bad = [k for k in layers if not 0 <= k < cfg_a.num_layers]
    if bad:
        raise DraftlabError(f"--layers: layer {bad[0]} does not exist; the targets have layers "
                            f"0..{cfg_a.num_layers - 1}")
    layers = sorted(set(layers))
    if drafter is not None:
        check_room(prompts, target_a, cfg_a)  # the drafter's probe needs room, known before any model loads
    sequences = drift_sequences(prompts, target_a, cfg_a)

    clock = Clock()
    runner_a = TargetRunner.load(target_a, aux_layers=layers, dtype=dtype, device=device)
    runner_b = TargetRunner.load(target_b, aux_layers=layers, dtype=dtype, device=device)
    clock.lap("load_s")
    hidden, tokens = compare_targets(runner_a, runner_b, sequences, layers, batch_size=batch_size, progress=progress)
    del runner_a, runner_b
    clock.lap("compare_s")

    result = DriftResult(
        config={"target_a": str(target_a), "target_b": str(target_b),
                "drafter": None if drafter is None else str(drafter), "layers": layers,
                **(deployment.describe() if drafter is not None else NO_DEPLOYMENT),
                "dtype": dtype, "device": device, "num_sequences": len(sequences)},
        layers=hidden, next_token_agreement=tokens.agreement, kl=tokens.kl, num_positions=tokens.n,
    )
    if drafter is not None:
        options = dict(steps=steps, topk=topk, num_draft_tokens=num_draft_tokens, max_new_tokens=max_new_tokens,
                       batch_size=batch_size, dtype=dtype, device=device, deployment=deployment, progress=progress)
        result.accept_length_a = probe(target_a, drafter, prompts, **options).mean_accept_length
        result.accept_length_b = probe(target_b, drafter, prompts, **options).mean_accept_length
        result.config.update(max_new_tokens=max_new_tokens)
        clock.lap("probe_s")
    result.timings = clock.timings()
    return result


def compare_targets(runner_a: TargetRunner, runner_b: TargetRunner, sequences: list[list[int]], layers: list[int], *,
                    batch_size: int = 4, progress: bool = False) -> tuple[list[LayerDrift], NextTokenDrift]:
    """Per-layer hidden drift at ``layers`` (each runner captures exactly these, in order) and
    next-token drift of two targets already in memory over the same ``sequences``."""
    hidden = [HiddenDrift(k) for k in layers]
    tokens = NextTokenDrift()
    width = runner_a.config.hidden_size
    with Progress(console=Console(stderr=True), transient=True, disable=not progress) as bar:
        task = bar.add_task("comparing targets", total=len(sequences))
        for start in range(0, len(sequences), batch_size):
            batch = sequences[start:start + batch_size]
            ids = torch.zeros(len(batch), max(len(s) for s in batch), dtype=torch.long)
            real = torch.zeros_like(ids, dtype=torch.bool)
            for row, seq in enumerate(batch):
                ids[row, :len(seq)] = torch.tensor(seq)
                real[row, :len(seq)] = True
            out_a, out_b = runner_a.forward_batch(ids), runner_b.forward_batch(ids)
            real = real.to(out_a.aux.device)
            for i, measure in enumerate(hidden):
                part = slice(i * width, (i + 1) * width)
                measure.update(out_a.aux[..., part][real].float(), out_b.aux[..., part][real].float())
            ha, hb = out_a.hidden[real], out_b.hidden[real]
            for i in range(0, ha.shape[0], 512):
                logits_b = runner_b.lm_head(hb[i:i + 512]).float().to(ha.device)
                tokens.update(runner_a.lm_head(ha[i:i + 512]).float(), logits_b)
            bar.advance(task, len(batch))
    return [m.result() for m in hidden], tokens


def drift_sequences(prompts: str | Path, target: str | Path, cfg: TargetConfig) -> list[list[int]]:
    """Each prompt's ids, followed by its response_ids when the row has them, cut to the context."""
    rows = read_prompts(prompts, tokenizer_dir=target, vocab_size=cfg.vocab_size)
    lines = [json.loads(line) for line in Path(prompts).read_text().splitlines() if line.strip()]
    out = []
    for row, line in zip(rows, lines):
        response = line.get("response_ids") or []
        if not all(isinstance(i, int) and 0 <= i < cfg.vocab_size for i in response):
            raise DraftlabError(f"{prompts}:{row.line}: response_ids must be token ids of the target's vocabulary")
        seq = row.input_ids + response
        out.append(seq[:cfg.max_position_embeddings] if cfg.max_position_embeddings else seq)
    return out
