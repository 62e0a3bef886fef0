"""Seconds-long training of the toy target (next byte) and of its EAGLE-3 drafter (TTT on aux features).

The drafter is trained as EAGLE-3 / SpecForge train it, at toy scale: row t gets the target feature
of position t and the token at t + 1 and learns the target's distribution for token t + 2 (restricted
to the draft vocabulary, positions whose target top-1 lies outside it carry no loss); then a few
unrolled steps feed its own output back (training-time test), each step one position further on,
attending to the real prefix plus its own earlier steps at the same row (within the drafter's window, by
position), with loss weights 0.8^step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from draftlab.fsutil import atomic_dir
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner
from draftlab.toy.corpus import stdlib_text
from draftlab.toy.tokenizer import END

Progress = Callable[[int], None]  # called with the number of steps just done


@contextmanager
def building(out_dir: Path) -> Iterator[Path]:
    """The temporary folder a toy is built in, moved to ``out_dir`` (which must not exist) once complete; on
    one thread (these ops are too small to gain from threads, and one thread is reproducible), the global
    RNG state restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with atomic_dir(out_dir) as tmp, torch.random.fork_rng():
            yield tmp
    finally:
        torch.set_num_threads(threads)


def trained_target(config: PretrainedConfig, seed: int, *, steps: int, batch: int, length: int, train_bytes: int
                   ) -> tuple[PreTrainedModel, torch.Tensor, torch.Generator]:
    """A toy target's start: the seeds, the training bytes, a model of ``config`` trained on them, its
    generation ending at the byte tokenizer's END. Returns it, the bytes and the generator, which goes on."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.frombuffer(bytearray(stdlib_text("train", train_bytes)), dtype=torch.uint8).long()
    model = train_target(config, tokens, steps=steps, batch=batch, length=length, lr=3e-3, gen=gen,
                         progress=lambda _: None)
    model.generation_config.eos_token_id = END
    model.generation_config.pad_token_id = END
    return model, tokens, gen


def random_windows(tokens: torch.Tensor, count: int, length: int, gen: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, tokens.numel() - length, (count,), generator=gen)
    return torch.stack([tokens[s:s + length] for s in starts.tolist()])


def train_target(config: PretrainedConfig, tokens: torch.Tensor, *, steps: int, batch: int, length: int, lr: float,
                 gen: torch.Generator, progress: Progress) -> PreTrainedModel:
    """A small causal LM of ``config``'s family (the toy Llama, the toy DeepSeek-V3) trained on
    next-token prediction over ``tokens``."""
    model = AutoModelForCausalLM.from_config(config)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    model.train()
    for _ in range(steps):
        x = random_windows(tokens, batch, length, gen)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        progress(1)
    return model.eval()


@torch.no_grad()
def target_features(runner: TargetRunner, windows: torch.Tensor, progress: Progress
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Aux features [B, S, k*T] and logits [B, S, V] of each window, through the runner's own capture."""
    feats, logits = [], []
    for window in windows:
        runner.reset()
        step = runner.forward(window)
        feats.append(step.aux)
        logits.append(step.logits)
        progress(1)
    runner.reset()
    return torch.stack(feats), torch.stack(logits)


def ttt_loss(drafter: Eagle3Drafter, ids: torch.Tensor, feats: torch.Tensor, logits: torch.Tensor,
             t2d: torch.Tensor, unroll: int) -> tuple[torch.Tensor, list[float]]:
    """The weighted TTT loss over ``unroll`` steps and each step's top-1 agreement with the target."""
    b, s = ids.shape
    n = s - unroll  # rows t = 0..n-1; step j reads token t + 1 + j and predicts token t + 2 + j
    rows = torch.arange(n)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    eye = torch.eye(n, dtype=torch.bool)
    hidden, past = feats[:, :n], None
    total, accs = torch.zeros(()), []
    for j in range(unroll):
        mask = torch.cat([causal] + [eye] * j, dim=1).expand(b, n, -1)
        keys = torch.cat([rows + i for i in range(j + 1)])[None]  # the prefix's positions, then each step's
        out, hidden, kv = drafter.forward_masked(ids[:, 1 + j:1 + j + n], hidden, (rows + j).expand(b, n), mask, past,
                                                 key_positions=keys)
        past = kv if past is None else [(torch.cat([pk, k], 2), torch.cat([pv, v], 2)) for (pk, pv), (k, v) in zip(past, kv)]
        target = logits[:, 1 + j:1 + j + n]
        weight = t2d[target.argmax(-1)].float()
        p = target[..., t2d].softmax(-1)
        loss = -(p * out.log_softmax(-1)).sum(-1)
        total = total + 0.8 ** j * (loss * weight).sum() / weight.sum().clamp(min=1)
        agree = (drafter.to_target_ids(out.argmax(-1)) == target.argmax(-1)).float().mean()
        accs.append(float(agree))
    return total, accs


def train_drafter(drafter: Eagle3Drafter, ids: torch.Tensor, feats: torch.Tensor, logits: torch.Tensor,
                  t2d: torch.Tensor, *, steps: int, batch: int, unroll: int, lr: float, gen: torch.Generator,
                  progress: Progress) -> list[float]:
    """Train on random rows of the precomputed features; returns the last batch's per-step agreement."""
    params = [p for name, p in drafter.named_parameters() if not name.startswith("embed_tokens.")]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    drafter.embed_tokens.weight.requires_grad_(False)
    drafter.train()
    accs: list[float] = []
    for _ in range(steps):
        pick = torch.randint(0, ids.shape[0], (batch,), generator=gen)
        loss, accs = ttt_loss(drafter, ids[pick], feats[pick], logits[pick], t2d, unroll)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        sched.step()
        progress(1)
    drafter.eval()
    return accs


def agreement(drafter: Eagle3Drafter, ids: torch.Tensor, feats: torch.Tensor, logits: torch.Tensor) -> float:
    """Top-1 agreement of the drafter's first step with the target's next-next token, on given windows."""
    with torch.no_grad():
        b, s = ids.shape
        n = s - 1
        mask = torch.ones(n, n, dtype=torch.bool).tril().expand(b, n, n)
        out, _, _ = drafter.forward_masked(ids[:, 1:], feats[:, :n], torch.arange(n).expand(b, n), mask)
        return float((drafter.to_target_ids(out.argmax(-1)) == logits[:, 1:].argmax(-1)).float().mean())
