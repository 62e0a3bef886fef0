"""The soft cross-entropy of the TTT loss over the draft vocabulary, a chunk of rows at a time.

``-sum_r w_r * sum_v p_rv * log_softmax(h_r @ W^T)_v`` for hidden rows h [B, R, H], the lm_head W [V, H],
the teacher p [B, R, V] (float32) and row weights w [B, R] (SpecForge's position mask). Written plainly
the [R, V] float32 logits, their log-softmax and the product with p all stay alive for the backward,
at every TTT step. Here only one chunk of rows has logits at a time; the backward recomputes them
(d/dz = w * (softmax(z) * sum(p) - p)), so what stays per step is h and nothing of size V. The argmax
of each row comes out of the same pass (the accuracy needs it).

The matmuls run in the dtype of ``hidden`` and ``weight`` (the caller casts both to autocast's dtype,
as ``lm_head`` under autocast would); the logits are float32 as in ``Eagle3Drafter.finish``.
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 25  # logits per chunk (128 MiB of float32)


def soft_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target_p: torch.Tensor,
                       row_weight: torch.Tensor, chunk_rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed loss (float32 scalar, differentiable in ``hidden`` and ``weight``) and the argmax draft id
    of every row [B, R]. ``target_p`` and ``row_weight`` may have more rows than ``hidden``: the first R
    are used."""
    rows = hidden.shape[1]
    chunk = chunk_rows or max(1, CHUNK_ELEMENTS // weight.shape[0])
    return _SoftCrossEntropy.apply(hidden, weight, target_p[:, :rows], row_weight[:, :rows].float(), chunk)


def _chunks(batch: int, rows: int, chunk: int):
    for b in range(batch):
        for start in range(0, rows, chunk):
            yield b, slice(start, min(start + chunk, rows))


class _SoftCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target_p, row_weight, chunk):
        batch, rows, _ = hidden.shape
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        top = torch.empty(batch, rows, dtype=torch.long, device=hidden.device)
        for b, s in _chunks(batch, rows, chunk):
            logits = (hidden[b, s] @ weight.T).float()
            per_row = (target_p[b, s] * logits.log_softmax(-1)).sum(-1)
            total -= (row_weight[b, s] * per_row).sum()
            top[b, s] = logits.argmax(-1)
        ctx.save_for_backward(hidden, weight, target_p, row_weight)
        ctx.chunk = chunk
        ctx.mark_non_differentiable(top)
        return total, top

    @staticmethod
    def backward(ctx, grad_total, grad_top):
        hidden, weight, target_p, row_weight = ctx.saved_tensors
        batch, rows, _ = hidden.shape
        need_h, need_w = ctx.needs_input_grad[:2]
        grad_h = torch.zeros_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        for b, s in _chunks(batch, rows, ctx.chunk):
            h = hidden[b, s]
            logits = (h @ weight.T).float()
            p = target_p[b, s]
            scale = (grad_total * row_weight[b, s])[:, None]
            grad_logits = (scale * (logits.softmax(-1) * p.sum(-1, keepdim=True) - p)).to(hidden.dtype)
            if need_h:
                grad_h[b, s] = grad_logits @ weight
            if need_w:
                grad_w += (grad_logits.T @ h).float()
        return grad_h, None if grad_w is None else grad_w.to(weight.dtype), None, None, None
