"""The TTT loss as draftlab computed it before issue 27: SpecForge's "sdpa" formulation with the whole
[B, H, n, n] score matrix and the whole [B, n, V] log-softmax per step. The exactness reference of the
blocked/flex attention and the chunked cross-entropy (tests/train/test_ttt_kernels.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from draftlab.train.ttt import STEP_DECAY, TTTBatch, TTTResult, shift_left


def dense_ttt_loss(drafter, batch: TTTBatch, length: int, decay: float = STEP_DECAY) -> TTTResult:
    b, n = batch.input_ids.shape
    allowed = torch.ones(n, n, dtype=torch.bool).tril()[None] & batch.attention_mask[:, None, :]
    positions = torch.arange(n).expand(b, n)
    hidden = drafter.combine(batch.aux)
    input_ids, loss_mask, position_mask = batch.input_ids, batch.loss_mask, batch.teacher.position_mask
    target_p = F.pad(batch.teacher.target_p, (0, 0, 0, length), value=1 / batch.teacher.target_p.shape[-1])
    target_ids = F.pad(batch.teacher.target_ids, (0, length))
    keys, values, losses, correct, counted = [], [], [], [], []
    total = torch.zeros(())
    for i in range(length):
        embeds = drafter.embed_tokens(input_ids)
        logits, hidden = drafter.finish(_layer_step(drafter, embeds, hidden, positions + i, allowed, keys, values))
        loss = -(position_mask * target_p[:, i:i + n] * logits.log_softmax(-1)).sum(-1).mean()
        with torch.no_grad():
            predicted = drafter.to_target_ids(logits.argmax(-1))
            correct.append(((predicted == target_ids[:, i:i + n]) * loss_mask[..., 0]).sum())
            counted.append(loss_mask.sum())
        losses.append(loss)
        total = total + decay ** i * loss
        input_ids, loss_mask, position_mask = shift_left(input_ids), shift_left(loss_mask), shift_left(position_mask)
    return TTTResult(total, losses, correct, counted)


def _layer_step(drafter, embeds, hidden, positions, allowed, keys, values):
    layer = drafter.midlayer
    normed = layer.hidden_norm(hidden)
    residual = normed if layer.norm_before_residual else hidden
    x = torch.cat([layer.input_layernorm(embeds), normed], dim=-1)
    residual = residual + dense_attention(layer.self_attn, x, drafter.rotary(hidden, positions), allowed, keys, values)
    return layer.mlp(layer.post_attention_layernorm(residual)) + residual


def dense_attention(attn, x, rope, allowed, keys, values):
    n = x.shape[1]
    q, k, v = attn.project(x, rope)
    groups = q.shape[1] // k.shape[1]
    keys.append(k.repeat_interleave(groups, dim=1))
    values.append(v.repeat_interleave(groups, dim=1))
    divisor = math.sqrt(q.shape[-1]) if attn.scale is None else 1 / attn.scale
    scores = torch.matmul(q, keys[0].transpose(2, 3)) / divisor
    scores = scores.masked_fill(~allowed[:, None], torch.finfo(scores.dtype).min)
    diagonal = [(q * ki).sum(-1, keepdim=True) / divisor for ki in keys[1:]]
    weights = torch.cat([scores, *diagonal], dim=-1).softmax(-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(weights[..., :n], values[0])
    for i, vi in enumerate(values[1:], start=1):
        out = out + weights[..., n + i - 1:n + i] * vi
    return attn.output(out)
