"""Evaluation during training: the probe's exact accept length on held-out prompts (the target's own
greedy continuations, decoded once), beside teacher-forced per-step accuracy on the same text."""

from __future__ import annotations

from pathlib import Path

import torch

from draftlab.decode.prompts import read_prompts
from draftlab.engines.sglang_flags import SpecFlags
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner
from draftlab.probe.continuations import target_continuations
from draftlab.probe.probe import probe_sequences
from draftlab.train.data import TrainRow, pad_batch
from draftlab.train.ttt import TTTKernels, make_batch, ttt_loss


class Evaluator:
    """Held-out prompts and their continuations, ready to score any drafter for ``runner``."""

    def __init__(self, runner: TargetRunner, target_dir: str | Path, prompts: str | Path, flags: SpecFlags, *,
                 max_new_tokens: int, t2d: torch.Tensor, ttt_length: int, batch_size: int = 4) -> None:
        rows = read_prompts(prompts, tokenizer_dir=target_dir, vocab_size=runner.config.vocab_size)
        context = runner.config.max_position_embeddings
        want = max_new_tokens + flags.steps
        # every prompt shorter than the context counts, its continuation cut to the room it leaves (the
        # probe's rule), so a long prompt is measured up to the context rather than dropped
        self.prompts = [r.input_ids for r in rows if context is None or len(r.input_ids) < context]
        room = [want if context is None else min(want, context - len(p)) for p in self.prompts]
        decoded = target_continuations(runner, self.prompts, want, batch_size=batch_size)
        self.continuations = [c[:r] for c, r in zip(decoded, room)]
        self.runner, self.flags, self.max_new_tokens = runner, flags, max_new_tokens
        self.t2d, self.ttt_length, self.batch_size = t2d, ttt_length, batch_size

    @torch.no_grad()
    def __call__(self, drafter: Eagle3Drafter) -> dict:
        was_training = drafter.training
        drafter.eval()
        try:
            result = probe_sequences(self.runner, drafter, self.prompts, self.continuations, self.flags,
                                     max_new_tokens=self.max_new_tokens, batch_size=self.batch_size)
            accuracy = self._teacher_forced(drafter)
        finally:
            drafter.train(was_training)
        return {"accept_length": result.mean_accept_length, "acceptance_by_step": result.acceptance_by_step,
                "accuracy_by_step": accuracy}

    def _teacher_forced(self, drafter: Eagle3Drafter) -> list[float]:
        """TTT top-1 accuracy per step over the continuations (the figure training logs show)."""
        rows = [TrainRow(p + c, [0] * len(p) + [1] * (len(c) - 1) + [0])
                for p, c in zip(self.prompts, self.continuations)]
        correct = torch.zeros(self.ttt_length)
        counted = torch.zeros(self.ttt_length)
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start:start + self.batch_size]
            ids, mask, attn = pad_batch(chunk, max(len(r.input_ids) for r in chunk))
            step = self.runner.forward_batch(ids)
            batch = make_batch(ids, mask, step.aux, step.hidden, self.runner.lm_head, self.t2d, attn)
            # the exact blocked kernel, uncompiled: eval widths vary (flex would compile a kernel per width)
            result = ttt_loss(drafter, batch, self.ttt_length, kernels=TTTKernels())
            correct += torch.stack(result.step_correct).float().cpu()
            counted += torch.stack(result.step_counted).float().cpu()
        return (correct / counted.clamp(min=1)).tolist()
