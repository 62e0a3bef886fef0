"""The soft cross-entropy of the TTT loss over the draft vocabulary, a chunk of rows at a time.

``-sum_r w_r * sum_v p_rv * log_softmax(h_r @ W^T)_v`` for hidden rows h [B, R, H], the lm_head W [V, H],
the teacher p [B, R, V] (float32) and row weights w [B, R] (SpecForge's position mask). Written plainly
the [R, V] float32 logits, their log-softmax and the product with p all stay alive for the backward,
at every TTT step. Here only one chunk of rows has logits at a time, and the gradients are computed in
the same pass (the loss ends the graph: they are known up to the factor the backward brings), so what
stays per step is d/dh (the size of h) and d/dW (the size of the lm_head), whatever R is, and the
logits are never recomputed. The argmax of each row comes out of the same pass (the accuracy needs it).

d/dW is one GEMM over every row's d/dz (held in the matmul's dtype until the GEMM, up to
:data:`GRAD_W_ELEMENTS`), not a GEMM per chunk: summing per-chunk products needs a float32 [V, H]
accumulator, and its casts and adds streamed about 1 GB per chunk through memory, at every TTT step.
One GEMM also rounds d/dW once, as an unchunked lm_head's backward does.

The matmuls run in the dtype of ``hidden`` and ``weight`` (the caller casts both to autocast's dtype,
as ``lm_head`` under autocast would); the logits are float32 as in ``Eagle3Drafter.finish``.
"""

from __future__ import annotations

from functools import cache

import torch

CHUNK_ELEMENTS = 1 << 25  # logits per chunk (128 MiB of float32)
GRAD_W_ELEMENTS = 1 << 28  # d/dz elements held for one d/dW GEMM (512 MiB in bfloat16)


def soft_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target_p: torch.Tensor,
                       row_weight: torch.Tensor, chunk_rows: int | None = None, compile: bool = False,
                       group_rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed loss (float32 scalar, differentiable in ``hidden`` and ``weight``) and the argmax draft id
    of every row [B, R]. ``target_p`` and ``row_weight`` may have more rows than ``hidden``: the first R
    are used. ``compile``: a chunk's elementwise work (log-softmax, the loss, the argmax, d/dz) as one
    compiled kernel or two instead of a dozen passes over its [rows, V] float32 logits. ``group_rows``:
    rows of d/dz per d/dW GEMM (default: :data:`GRAD_W_ELEMENTS` worth)."""
    rows = hidden.shape[1]
    chunk = chunk_rows or max(1, CHUNK_ELEMENTS // weight.shape[0])
    group = group_rows or max(chunk, GRAD_W_ELEMENTS // weight.shape[0])
    grads = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    terms = _compiled_terms() if compile else _terms
    return _SoftCrossEntropy.apply(hidden, weight, target_p[:, :rows], row_weight[:, :rows].float(), chunk, grads,
                                   terms, group)


def _terms(logits: torch.Tensor, target_p: torch.Tensor, row_weight: torch.Tensor, grads: bool
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One chunk's logits [r, V] (the matmul's dtype) -> its summed loss, argmax [r] and, with ``grads``,
    d loss / d logits in the logits' dtype."""
    log_p = logits.float().log_softmax(-1)
    loss = -(row_weight * (target_p * log_p).sum(-1)).sum()
    if not grads:
        return loss, log_p.argmax(-1), None
    grad = row_weight[:, None] * (log_p.exp() * target_p.sum(-1, keepdim=True) - target_p)
    return loss, log_p.argmax(-1), grad.to(logits.dtype)


@cache
def _compiled_terms():
    return torch.compile(_terms)


def _chunks(batch: int, rows: int, chunk: int):
    for b in range(batch):
        for start in range(0, rows, chunk):
            yield b, slice(start, min(start + chunk, rows))


class _WeightGrad:
    """d/dW = sum over chunks of dz^T @ h: the chunks' dz and h are held until ``group_rows`` rows have
    come, then multiplied in one GEMM in the weight's dtype. Only a second group starts a float32 sum."""

    def __init__(self, weight: torch.Tensor, group_rows: int) -> None:
        self.dtype, self.group_rows = weight.dtype, group_rows
        self.dz: list[torch.Tensor] = []
        self.h: list[torch.Tensor] = []
        self.first: torch.Tensor | None = None
        self.sum: torch.Tensor | None = None

    def add(self, dz: torch.Tensor, h: torch.Tensor) -> None:
        self.dz.append(dz)
        self.h.append(h)
        if sum(part.shape[0] for part in self.dz) >= self.group_rows:
            self._multiply()

    def result(self) -> torch.Tensor:
        self._multiply()
        return self.first if self.sum is None else self.sum.to(self.dtype)

    def _multiply(self) -> None:
        if not self.dz:
            return
        part = _rows(self.dz).T @ _rows(self.h)
        self.dz, self.h = [], []
        if self.first is None and self.sum is None:
            self.first = part
            return
        if self.sum is None:
            self.sum, self.first = self.first.float(), None
        self.sum += part.float()


def _rows(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)


class _SoftCrossEntropy(torch.autograd.Function):
    """The loss is a scalar at the end of the graph, so its gradients are known up to the one factor
    the backward brings: the forward computes them chunk by chunk (d/dz = w * (softmax(z) * sum(p) - p),
    then d/dh = dz @ W and d/dW = dz^T @ h) and keeps only d/dh [B, R, H] and d/dW [V, H]; the backward
    scales them. No logits are kept or recomputed."""

    @staticmethod
    def forward(ctx, hidden, weight, target_p, row_weight, chunk, grads, terms, group_rows):
        batch, rows, _ = hidden.shape
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        top = torch.empty(batch, rows, dtype=torch.long, device=hidden.device)
        grad_h = torch.empty_like(hidden) if grads and hidden.requires_grad else None
        grad_w = _WeightGrad(weight, group_rows) if grads and weight.requires_grad else None
        for b, s in _chunks(batch, rows, chunk):
            h = hidden[b, s]
            loss, top[b, s], grad_logits = terms(h @ weight.T, target_p[b, s], row_weight[b, s], grads)
            total += loss
            if grad_h is not None:
                grad_h[b, s] = grad_logits @ weight
            if grad_w is not None:
                grad_w.add(grad_logits, h)
        ctx.save_for_backward(grad_h, None if grad_w is None else grad_w.result())
        ctx.mark_non_differentiable(top)
        return total, top

    @staticmethod
    def backward(ctx, grad_total, grad_top):
        grad_h, grad_w = ctx.saved_tensors
        return (None if grad_h is None else grad_h * grad_total.to(grad_h.dtype),
                None if grad_w is None else grad_w * grad_total.to(grad_w.dtype), None, None, None, None, None, None)
