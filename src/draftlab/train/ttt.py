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
  "diagonal"), a sliding-window drafter's only those less than its window positions behind the query
  (:mod:`.ttt_attention`); its hidden input is the previous step's pre-norm output, its tokens and masks are
  shifted i rows further on; the teacher of step i is ``target_p`` of row j + i;
- step loss = ``-sum(position_mask * target_p * log_softmax(logits)) / (B * n)``; total =
  ``sum_i 0.8**i * loss_i``; accuracy of step i = top-1 (mapped through d2t) equal to the target's
  top-1, over the step's loss-mask positions.

The layer's modules are the drafter's own (:class:`~draftlab.models.drafter.Eagle3Drafter`); only the
attention over earlier steps is written here, since decoding never needs it.

Memory: nothing of size n x n or [n, draft vocabulary] stays alive per step. The attention is
:mod:`.ttt_attention` (flex attention on CUDA, an exact blocked formulation elsewhere), the loss
:mod:`.soft_ce` (a chunk of rows' logits at a time, recomputed in the backward); rows past the end
of the teacher (the last i at step i, whose mask is zero) are left out of the loss instead of padded.
On CUDA the layer's two halves around the attention and the loss's elementwise work run through
``torch.compile`` (:class:`TTTKernels`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F
from torch import nn

from draftlab.errors import DraftlabError
from draftlab.models.drafter import Eagle3Drafter
from draftlab.train.soft_ce import soft_cross_entropy
from draftlab.train.ttt_attention import TTTLayout, ttt_attention

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
def teacher_from_logits(logits: torch.Tensor, t2d: torch.Tensor, loss_mask: torch.Tensor,
                        draft_ids: torch.Tensor | None = None) -> Teacher:
    """SpecForge's ``_compute_target_p`` over already-shifted target logits [B, n, V]. ``draft_ids``:
    ``t2d.nonzero()``, when the caller has it (a boolean index would read the device back every call)."""
    logits = logits.float()
    target_ids = logits.argmax(-1)
    position_mask = t2d[target_ids][..., None].int() * loss_mask
    draft_ids = t2d.nonzero()[:, 0] if draft_ids is None else draft_ids
    return Teacher(logits.index_select(-1, draft_ids).softmax(-1), target_ids, position_mask)


@torch.no_grad()
def teacher_from_hidden(lm_head: torch.nn.Module, hidden: torch.Tensor, t2d: torch.Tensor,
                        loss_mask: torch.Tensor, chunk: int = 1024) -> Teacher:
    """The teacher from already-shifted final hidden states [B, n, T], a chunk of rows at a time,
    so [B, n, V] logits never exist at once."""
    b, n, _ = hidden.shape
    head = lm_head.weight.device
    t2d = t2d.to(head)
    draft_ids = t2d.nonzero()[:, 0]
    parts = [teacher_from_logits(lm_head(hidden[:, s:s + chunk].to(head)), t2d, loss_mask[:, s:s + chunk].to(head),
                                 draft_ids) for s in range(0, n, chunk)]
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


FLEX_HEAD_DIMS = (16, 128)  # the head widths flex attention's Triton kernels take on CUDA (see for_device)


@dataclass(frozen=True)
class TTTKernels:
    """How :func:`ttt_loss` runs (the same function either way): the attention kernel, "flex" or
    "blocked" (:mod:`.ttt_attention`), and whether the layer's two halves around the attention
    (norms, projections, RoPE; o_proj, MLP, final norm) and the loss's elementwise work per chunk
    (:mod:`.soft_ce`) go through ``torch.compile``."""

    attention: str = "blocked"
    compile: bool = False

    @classmethod
    def for_device(cls, device: torch.device | str, head_dim: int, compile: bool | None = None) -> TTTKernels:
        """flex on CUDA for heads of 16 to 128 dims, blocked elsewhere: under 16 its Triton kernels
        cannot run, and over 128 (an MLA drafter's 192: 128 nope + 64 rope) its default tiles asked an
        H200 for 346 KB of shared memory against 227 KB (the GPU smoke run, session 10); compile on
        CUDA unless ``compile`` says otherwise."""
        cuda = torch.device(device).type == "cuda"
        flex = cuda and FLEX_HEAD_DIMS[0] <= head_dim <= FLEX_HEAD_DIMS[1]
        return cls("flex" if flex else "blocked", cuda if compile is None else compile)


def ttt_loss(drafter: Eagle3Drafter, batch: TTTBatch, length: int = 7, decay: float = STEP_DECAY,
             kernels: TTTKernels | None = None) -> TTTResult:
    """Unroll ``length`` TTT steps of ``drafter`` over ``batch``; differentiable in the drafter's weights.
    ``kernels`` default to :meth:`TTTKernels.for_device` for the drafter's device."""
    if drafter.config.num_layers != 1:
        raise DraftlabError(f"TTT trains one-layer EAGLE-3 drafters (SGLang's limit); this one has "
                            f"{drafter.config.num_layers}")
    if length < 1:
        raise DraftlabError(f"--ttt-length must be >= 1, got {length}")
    b, n = batch.input_ids.shape
    device, dtype = drafter.lm_head.weight.device, drafter.lm_head.weight.dtype
    attn = drafter.midlayer.self_attn
    kernels = kernels or TTTKernels.for_device(device, attn.head_dim)
    project, finish = (_compiled(_run_project), _compiled(_run_finish)) if kernels.compile \
        else (_run_project, _run_finish)
    compute = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else dtype
    head = drafter.lm_head.weight.to(compute)  # cast once for every step, as autocast caches it
    halves, weights = _halves(drafter), _cast_weights(drafter, compute)
    layout = TTTLayout.build(batch.attention_mask.to(device), length, drafter.windows[0])
    positions = torch.arange(n, device=device).expand(b, n)
    hidden = drafter.combine(batch.aux.to(device, dtype))
    input_ids = F.pad(batch.input_ids, (0, length - 1))  # step i reads tokens i.. (shifted i times)
    teacher, loss_mask = batch.teacher, batch.loss_mask[..., 0]
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    total = torch.zeros((), device=device)
    losses, correct, counted = [], [], []
    for i in range(length):
        embeds = drafter.embed_tokens(input_ids[:, i:i + n].to(drafter.embed_tokens.weight.device)).to(device, dtype)
        # RoPE in the matmuls' dtype: a norm_output drafter carries a float32 hidden state, whose cos/sin would
        # make q and k float32 next to a bf16 v (flex attention's backward refuses mixed dtypes)
        cos, sin = (t.to(compute) for t in drafter.rotary(hidden, positions + i))
        q, k, v, residual = project(halves, weights, embeds, hidden, cos, sin)
        keys.append(layout.pad(k))
        values.append(layout.pad(v))
        out = ttt_attention(q, layout.stack(keys), layout.stack(values), i, layout, attn.scale, kernels.attention)
        normed, hidden = finish(halves, weights, out, residual, compute)
        rows = n - i  # row j's teacher is row j + i's: the last i rows have none (and no loss)
        if rows > 0:
            summed, top = soft_cross_entropy(normed[:, :rows], head, teacher.target_p[:, i:],
                                             teacher.position_mask[:, i:, 0], compile=kernels.compile)
            loss = summed / (b * n)
            with torch.no_grad():
                hits = drafter.to_target_ids(top) == teacher.target_ids[:, i:]
                correct.append((hits * loss_mask[:, i:]).sum())
        else:
            loss = torch.zeros((), device=device)
            correct.append(torch.zeros((), dtype=torch.long, device=device))
        counted.append(loss_mask[:, i:].sum())
        losses.append(loss)
        total = total + decay ** i * loss
    return TTTResult(total, losses, correct, counted)


def _project(drafter: Eagle3Drafter, embeds: torch.Tensor, hidden: torch.Tensor, cos: torch.Tensor,
             sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The drafter's ``midlayer`` (as :meth:`Eagle3Drafter.forward_masked` runs it) up to the attention:
    queries, keys and values of concat(input_layernorm(embeds), hidden_norm(hidden)), and the residual."""
    layer = drafter.midlayer
    normed = layer.hidden_norm(hidden)
    residual = normed if layer.norm_before_residual else hidden
    x = torch.cat([layer.input_layernorm(embeds), normed], dim=-1)
    q, k, v = layer.self_attn.project(x, (cos, sin))
    return q, k, v, residual


def _finish(drafter: Eagle3Drafter, attention: torch.Tensor, residual: torch.Tensor, compute: torch.dtype
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The rest of the layer after the attention: norm(out) in the lm_head's matmul dtype, and the hidden
    the next step receives."""
    layer = drafter.midlayer
    residual = residual + layer.self_attn.output(attention)
    normed, hidden = drafter.head_input(layer.mlp(layer.post_attention_layernorm(residual)) + residual)
    return normed.to(compute), hidden


class _Halves(nn.Module):
    """The drafter's layer as two calls around the TTT attention, one module so that
    ``functional_call`` can run them with the weights autocast would cast handed in already cast: a
    compiled graph would otherwise cast every weight again at every TTT step (autocast's cache of casts
    does not reach inside it)."""

    def __init__(self, drafter: Eagle3Drafter) -> None:
        super().__init__()
        self.drafter = drafter

    def forward(self, part: str, *args):
        return (_project if part == "project" else _finish)(self.drafter, *args)


_HALVES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _halves(drafter: Eagle3Drafter) -> _Halves:
    """One wrapper per drafter (a compiled call recompiles for a new module object)."""
    if drafter not in _HALVES:
        _HALVES[drafter] = _Halves(drafter)
    return _HALVES[drafter]


def _cast_weights(drafter: Eagle3Drafter, compute: torch.dtype) -> dict[str, torch.Tensor]:
    """The layer's linear weights in autocast's dtype (cast once per loss, as eager autocast caches
    them; their gradients flow back to the float32 masters through the cast). Empty without autocast."""
    if compute == drafter.lm_head.weight.dtype:
        return {}
    return {f"drafter.midlayer.{module_name}.{name}": p.to(compute)
            for module_name, module in drafter.midlayer.named_modules() if isinstance(module, nn.Linear)
            for name, p in module.named_parameters(recurse=False)}


def _run_project(halves: _Halves, weights: dict[str, torch.Tensor], *args):
    return torch.func.functional_call(halves, weights, ("project", *args))


def _run_finish(halves: _Halves, weights: dict[str, torch.Tensor], *args):
    return torch.func.functional_call(halves, weights, ("finish", *args))


@cache
def _compiled(fn):
    """``fn`` through torch.compile, once per process (dynamo recompiles per new shape; after a second
    batch width it compiles one graph for every width)."""
    return torch.compile(fn)
