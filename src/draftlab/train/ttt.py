"""The EAGLE-3 training-time-test (TTT) loss, computed as SpecForge computes it.

SpecForge (``OnlineEagle3Model.forward`` in ``specforge/algorithms/eagle3/model.py``, its "sdpa"
attention in ``specforge/modeling/draft/llama3_eagle.py``; ``TargetHead.preprocess``):

- inputs are shifted once before the loop: row j holds the target's aux features at j, the token at
  j + 1 and the target's logits at j + 1 (its distribution of token j + 2); ``loss_mask`` is not
  shifted (a row's mask is its own token's); the shifted-in last row is zeros;
- teacher: ``target_p = softmax(logits[..., t2d])`` (the target renormalised over the draft
  vocabulary); ``position_mask = t2d[argmax logits] * loss_mask`` (a row whose target top-1 the
  drafter cannot propose carries no loss);
- step i (0-based) runs the drafter's layer with queries at RoPE position j + i over the step-0 keys
  0..j (causal) plus, for each earlier step l = 1..i, the one key that step made at row j (the
  "diagonal"); its hidden input is the previous step's pre-norm output, its tokens and masks are
  shifted i rows further on; the teacher of step i is ``target_p`` of row j + i;
- step loss = ``-sum(position_mask * target_p * log_softmax(logits)) / (B * n)``; total =
  ``sum_i 0.8**i * loss_i``; accuracy of step i = top-1 (mapped through d2t) equal to the target's
  top-1, over the step's loss-mask positions.

The layer's modules are the drafter's own (:class:`~draftlab.models.drafter.Eagle3Drafter`); only the
attention over earlier steps is written here, since decoding never needs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from draftlab.errors import DraftlabError
from draftlab.models.drafter import Eagle3Drafter

STEP_DECAY = 0.8  # SpecForge's ploss_decay / EAGLE's ploss_weight base


@dataclass
class Teacher:
    target_p: torch.Tensor  # [B, n, Vd] float32, the target over the draft vocabulary
    target_ids: torch.Tensor  # [B, n] the target's top-1 over its whole vocabulary
    position_mask: torch.Tensor  # [B, n, 1] loss_mask where the top-1 is in the draft vocabulary


@dataclass
class TTTBatch:
    """One batch as the loop reads it (already shifted, as SpecForge's preprocess leaves it)."""

    input_ids: torch.Tensor  # [B, n] token j + 1 at row j
    aux: torch.Tensor  # [B, n, k*T] target features of row j
    teacher: Teacher
    loss_mask: torch.Tensor  # [B, n, 1]
    attention_mask: torch.Tensor  # [B, n] bool, False on right padding


@dataclass
class TTTResult:
    loss: torch.Tensor  # sum_i 0.8**i * step_losses[i]
    step_losses: list[torch.Tensor]
    step_correct: list[torch.Tensor]  # positions whose top-1 equals the target's, per step
    step_counted: list[torch.Tensor]  # loss-mask positions per step (the accuracy's denominator)


def shift_left(t: torch.Tensor) -> torch.Tensor:
    """Rows move one up along dim 1, a zero row enters at the end (SpecForge's ``padding(left=False)``)."""
    return torch.cat([t[:, 1:], torch.zeros_like(t[:, -1:])], dim=1)


@torch.no_grad()
def teacher_from_logits(logits: torch.Tensor, t2d: torch.Tensor, loss_mask: torch.Tensor) -> Teacher:
    """SpecForge's ``_compute_target_p`` over already-shifted target logits [B, n, V]."""
    logits = logits.float()
    target_ids = logits.argmax(-1)
    position_mask = t2d[target_ids][..., None].int() * loss_mask
    return Teacher(logits[..., t2d].softmax(-1), target_ids, position_mask)


@torch.no_grad()
def teacher_from_hidden(lm_head: torch.nn.Module, hidden: torch.Tensor, t2d: torch.Tensor,
                        loss_mask: torch.Tensor, chunk: int = 1024) -> Teacher:
    """The teacher from already-shifted final hidden states [B, n, T], a chunk of rows at a time,
    so [B, n, V] logits never exist at once."""
    b, n, _ = hidden.shape
    head = lm_head.weight.device
    parts = [teacher_from_logits(lm_head(hidden[:, s:s + chunk].to(head)), t2d.to(head),
                                 loss_mask[:, s:s + chunk].to(head)) for s in range(0, n, chunk)]
    device = loss_mask.device
    return Teacher(torch.cat([p.target_p for p in parts], 1).to(device),
                   torch.cat([p.target_ids for p in parts], 1).to(device),
                   torch.cat([p.position_mask for p in parts], 1).to(device))


def make_batch(input_ids: torch.Tensor, loss_mask: torch.Tensor, aux: torch.Tensor, final_hidden: torch.Tensor,
               lm_head: torch.nn.Module, t2d: torch.Tensor, attention_mask: torch.Tensor | None = None) -> TTTBatch:
    """SpecForge's preprocessing of unshifted rows: input_ids [B, n], loss_mask [B, n], aux [B, n, k*T],
    final (post-norm) hidden [B, n, T]. Shifting the final hidden by a zero row gives the zero logits
    SpecForge shifts in (the lm_head has no bias)."""
    device = aux.device
    mask = loss_mask.to(device)[..., None]
    teacher = teacher_from_hidden(lm_head, shift_left(final_hidden), t2d.to(device), mask)
    if attention_mask is None:
        attention_mask = torch.ones(input_ids.shape, dtype=torch.bool, device=device)
    return TTTBatch(shift_left(input_ids.to(device)), aux, teacher, mask, attention_mask.to(device, torch.bool))


def ttt_loss(drafter: Eagle3Drafter, batch: TTTBatch, length: int = 7, decay: float = STEP_DECAY) -> TTTResult:
    """Unroll ``length`` TTT steps of ``drafter`` over ``batch``; differentiable in the drafter's weights."""
    if drafter.config.num_layers != 1:
        raise DraftlabError(f"TTT trains one-layer EAGLE-3 drafters (SGLang's limit); this one has "
                            f"{drafter.config.num_layers}")
    if length < 1:
        raise DraftlabError(f"--ttt-length must be >= 1, got {length}")
    b, n = batch.input_ids.shape
    device, dtype = drafter.lm_head.weight.device, drafter.lm_head.weight.dtype
    allowed = torch.ones(n, n, dtype=torch.bool, device=device).tril()[None] & batch.attention_mask[:, None, :]
    positions = torch.arange(n, device=device).expand(b, n)
    hidden = drafter.combine(batch.aux.to(device, dtype))
    input_ids, loss_mask, position_mask = batch.input_ids, batch.loss_mask, batch.teacher.position_mask
    target_p = F.pad(batch.teacher.target_p, (0, 0, 0, length), value=1 / batch.teacher.target_p.shape[-1])
    target_ids = F.pad(batch.teacher.target_ids, (0, length))
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    total = torch.zeros((), device=device)
    losses, correct, counted = [], [], []
    for i in range(length):
        embeds = drafter.embed_tokens(input_ids.to(drafter.embed_tokens.weight.device)).to(device, dtype)
        logits, hidden = drafter.finish(_layer_step(drafter, embeds, hidden, positions + i, allowed, keys, values))
        step_p = target_p[:, i:i + n]
        loss = -(position_mask * step_p * logits.log_softmax(-1)).sum(-1).mean()
        with torch.no_grad():
            predicted = drafter.to_target_ids(logits.argmax(-1))
            correct.append(((predicted == target_ids[:, i:i + n]) * loss_mask[..., 0]).sum())
            counted.append(loss_mask.sum())
        losses.append(loss)
        total = total + decay ** i * loss
        if i < length - 1:
            input_ids, loss_mask = shift_left(input_ids), shift_left(loss_mask)
            position_mask = shift_left(position_mask)
    return TTTResult(total, losses, correct, counted)


def _layer_step(drafter: Eagle3Drafter, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
                allowed: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]) -> torch.Tensor:
    """The drafter's ``midlayer`` (as :meth:`Eagle3Drafter.forward_masked` runs it) with TTT attention;
    appends this step's keys/values. Returns the pre-norm output."""
    layer = drafter.midlayer
    normed = layer.hidden_norm(hidden)
    residual = normed if layer.norm_before_residual else hidden
    x = torch.cat([layer.input_layernorm(embeds), normed], dim=-1)
    residual = residual + _attention(layer.self_attn, x, drafter.rotary(hidden, positions), allowed, keys, values)
    return layer.mlp(layer.post_attention_layernorm(residual)) + residual


def _attention(attn: torch.nn.Module, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
               allowed: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]) -> torch.Tensor:
    """Queries over step 0's keys (``allowed`` [B, n, n]) and, per earlier step, its key at the same row;
    any attention kind of the drafter (its ``project``, ``scale`` and ``output``)."""
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
