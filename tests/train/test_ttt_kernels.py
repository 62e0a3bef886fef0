"""The TTT loss's memory-bounded kernels against the dense formulation they replace (ttt_reference.py):
the blocked attention, flex attention's block lists (and the compiled flex kernel's forward, which runs
on the CPU), the chunked soft cross-entropy, and the compiled layer halves the GPU runs."""

from __future__ import annotations

import pytest
import torch
from helpers import DRAFT_VOCAB, MLA_FIELDS, random_rows, tiny_drafter
from torch._dynamo.utils import counters
from ttt_reference import dense_ttt_loss

from draftlab.toy.variants import VARIANT_FLAGS
from draftlab.train import soft_ce, ttt, ttt_attention
from draftlab.train.soft_ce import soft_cross_entropy
from draftlab.train.ttt import TTTBatch, TTTKernels, shift_left, teacher_from_logits, ttt_loss
from draftlab.train.ttt_attention import BLOCK, TTTLayout, block_lists, compiled_flex, mask_mod_for

LENGTHS = [1, 5, 128, 130, 300]  # one row, a few, one block exactly, two that straddle flex's 128-row blocks


def _padded_batch(b: int, n: int, pad: int, seed: int = 1, **fields) -> TTTBatch:
    """A batch for ``tiny_drafter(**fields)`` whose last row ends ``pad`` rows early (right padding: no
    attention to it, no loss on it)."""
    _, t2d = tiny_drafter(**fields)
    ids, mask, aux, logits = random_rows(b, n, seed)
    attention = torch.ones(b, n, dtype=torch.bool)
    attention[-1, n - pad:] = False
    loss_mask = (mask * attention)[..., None]
    batch = TTTBatch(shift_left(ids), aux, teacher_from_logits(shift_left(logits), t2d, loss_mask), loss_mask,
                     attention)
    return batch


def _grads(drafter) -> dict[str, torch.Tensor]:
    grads = {k: p.grad.clone() for k, p in drafter.named_parameters() if p.grad is not None}
    drafter.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("fields", [{}, MLA_FIELDS], ids=["gqa", "mla"])
def test_ttt_loss_equals_the_dense_formulation(n, fields, monkeypatch):
    """Loss, per-step losses, accuracy counts and every gradient equal the n x n formulation, with the
    attention and the loss each split into several chunks (sizes that divide nothing here), right padding
    in one row, and more TTT steps than rows at n = 1."""
    monkeypatch.setattr(ttt_attention, "CHUNK", 64)
    monkeypatch.setattr(soft_ce, "CHUNK_ELEMENTS", 7 * DRAFT_VOCAB)  # 7 rows per chunk
    drafter, _ = tiny_drafter(**fields)
    batch = _padded_batch(2, n, pad=min(n - 1, 9), **fields)
    length = 4

    want = dense_ttt_loss(drafter, batch, length)
    want.loss.backward()
    want_grads = _grads(drafter)
    got = ttt_loss(drafter, batch, length, kernels=TTTKernels("blocked", False))
    got.loss.backward()
    got_grads = _grads(drafter)

    torch.testing.assert_close(got.loss, want.loss, rtol=1e-5, atol=1e-7)
    for a, b in zip(got.step_losses, want.step_losses, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert [int(c) for c in got.step_correct] == [int(c) for c in want.step_correct]
    assert [int(c) for c in got.step_counted] == [int(c) for c in want.step_counted]
    assert set(got_grads) == set(want_grads) and len(got_grads) > 10
    for name, g in want_grads.items():
        torch.testing.assert_close(got_grads[name], g, rtol=1e-4, atol=1e-6, msg=name)
    if n > 1:
        assert want.step_losses[-1] > 0  # the last step still carries loss


def _dense_mask(layout: TTTLayout, step: int) -> torch.Tensor:
    """mask_mod evaluated at every (row, key) [B, n, length * stride]."""
    b = layout.valid.shape[0]
    idx = [torch.arange(b)[:, None, None], torch.zeros(1, 1, 1, dtype=torch.long),
           torch.arange(layout.n)[None, :, None], torch.arange(layout.length * layout.stride)[None, None, :]]
    return mask_mod_for(layout, step)(*idx)


def allowed_blocks(layout: TTTLayout, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, q blocks, kv blocks] bool: blocks holding some allowed (row, key) pair, and blocks whose every
    pair is allowed (over the rows that exist)."""
    dense = _dense_mask(layout, step)
    b, rows, keys = dense.shape
    padded = torch.zeros(b, layout.stride, keys, dtype=torch.bool)
    padded[:, :rows] = dense
    blocks = padded.view(b, layout.stride // BLOCK, BLOCK, keys // BLOCK, BLOCK)
    real = torch.zeros(layout.stride, dtype=torch.bool)
    real[:rows] = True
    return blocks.any(4).any(2), (blocks | ~real.view(1, -1, BLOCK, 1, 1)).all(4).all(2)


@pytest.mark.parametrize("n", LENGTHS)
def test_block_lists_cover_exactly_the_allowed_blocks(n):
    """A block flex skips holds no allowed (row, key) pair; a block it computes without the mask ("full")
    holds only allowed ones; every block with an allowed pair is computed. At every step, with padding."""
    attention = torch.ones(2, n, dtype=torch.bool)
    attention[1, n - min(n - 1, 70):] = False
    layout = TTTLayout.build(attention, length=3)
    for step in range(3):
        some, every = allowed_blocks(layout, step)
        partial, full = block_lists(layout, step)
        assert torch.equal(partial | full, some)
        assert not (partial & full).any()
        assert torch.equal(full, every & some)


def test_compiled_flex_forward_equals_blocked():
    """The compiled flex kernel (its CPU forward; flex has no CPU backward) with these block masks gives
    the blocked kernel's output at every step, with and without a sliding window, and one compiled graph
    serves every step, batch and window of a width (a second width adds at most one more)."""
    torch.manual_seed(0)
    b, heads, kv_heads, dim, length = 2, 4, 2, 16, 3
    before = counters["stats"]["unique_graphs"]
    for n, window in ((300, None), (300, 100), (256, None)):  # 256: a power of two, where nothing is padded
        attention = torch.ones(b, n, dtype=torch.bool)
        attention[1, n - 40:] = False
        layout = TTTLayout.build(attention, length, window)
        q = torch.randn(b, heads, n, dim)
        keys = [layout.pad(torch.randn(b, kv_heads, n, dim)) for _ in range(length)]
        values = [layout.pad(torch.randn(b, kv_heads, n, dim)) for _ in range(length)]
        for step in range(length):
            k, v = layout.stack(keys[:step + 1]), layout.stack(values[:step + 1])
            flex = ttt_attention.ttt_attention(q, k, v, step, layout, None, "flex")
            blocked = ttt_attention.ttt_attention(q, k, v, step, layout, None, "blocked")
            torch.testing.assert_close(flex, blocked, rtol=1e-5, atol=1e-5)
    assert compiled_flex() is compiled_flex()
    assert counters["stats"]["unique_graphs"] - before <= 2


@pytest.mark.parametrize(("dtype", "compiled", "group_rows"),
                         [(torch.float32, False, None), (torch.bfloat16, False, None), (torch.float32, True, None),
                          (torch.float32, False, 10), (torch.bfloat16, False, 5)])
def test_soft_cross_entropy_equals_the_plain_loss(dtype, compiled, group_rows):
    """Chunked over rows (5 per chunk over 13 rows and 2 batch rows), rows of zero weight included, its
    elementwise part eager or compiled, d/dW one GEMM over every row or summed over groups of chunks:
    the summed loss, the argmax and both gradients equal log_softmax over the whole [B, R, V] logits."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 13, 8, generator=g).to(dtype).requires_grad_(True)
    weight = torch.randn(11, 8, generator=g).to(dtype).requires_grad_(True)
    target_p = torch.randn(2, 16, 11, generator=g).softmax(-1)  # more teacher rows than hidden rows
    row_weight = (torch.rand(2, 16, generator=g) < 0.7).long()

    loss, top = soft_cross_entropy(hidden, weight, target_p, row_weight, chunk_rows=5, compile=compiled,
                                   group_rows=group_rows)
    loss.backward()
    got = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    logits = (hidden @ weight.T).float()
    want = -(row_weight[:, :13, None] * target_p[:, :13] * logits.log_softmax(-1)).sum()
    want.backward()

    assert torch.equal(top, logits.argmax(-1))
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(loss, want, **tol)
    torch.testing.assert_close(got[0], hidden.grad, **tol)
    torch.testing.assert_close(got[1], weight.grad, **tol)
    assert got[0].dtype == dtype and got[1].dtype == dtype


def test_kernels_for_each_device():
    assert TTTKernels.for_device("cpu", 128) == TTTKernels("blocked", False)
    assert TTTKernels.for_device("cpu", 128, compile=True) == TTTKernels("blocked", True)
    assert TTTKernels.for_device("cuda", 128) == TTTKernels("flex", True)
    assert TTTKernels.for_device("cuda:1", 128, compile=False) == TTTKernels("flex", False)
    # an MLA drafter's 192-wide heads overflow flex's tiles on an H200: the exact blocked kernel there
    assert TTTKernels.for_device("cuda", 192) == TTTKernels("blocked", True)
    assert TTTKernels.for_device("cuda", 8) == TTTKernels("blocked", True)
    assert TTTKernels.for_device("cuda", 8) == TTTKernels("blocked", True)  # under flex's 16-dim minimum


def test_compiled_layer_equals_eager_under_autocast():
    """The GPU's configuration on the CPU: the layer halves through torch.compile under bf16 autocast,
    traced whole (no graph break), give the eager loss and gradients up to bf16 rounding, and a second
    batch of the same width (new weights after an optimizer step) reuses the compiled graphs."""
    drafter, _ = tiny_drafter()
    batch = _padded_batch(2, 37, pad=5)
    results = []
    breaks = sum(counters["graph_break"].values())
    for compiled in (False, True, True):
        graphs = counters["stats"]["unique_graphs"]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            result = ttt_loss(drafter, batch, 3, kernels=TTTKernels("blocked", compiled))
        result.loss.backward()
        results.append((result.loss.detach(), _grads(drafter)))
    assert counters["stats"]["unique_graphs"] == graphs  # the second compiled call compiled nothing
    assert sum(counters["graph_break"].values()) == breaks
    (eager, eager_grads), (compiled, compiled_grads), _ = results
    torch.testing.assert_close(compiled, eager, rtol=2e-2, atol=0)
    for name, g in eager_grads.items():
        scale = g.abs().max().clamp_min(1e-6)
        assert (compiled_grads[name] - g).abs().max() / scale < 0.1, name


@pytest.mark.parametrize("name", ["eagle3", *sorted(VARIANT_FLAGS)])
def test_attention_inputs_share_autocasts_dtype_for_every_variant(name, monkeypatch):
    """Flex attention's backward refuses queries, keys and values of mixed dtypes (an H200 run of an
    EAGLE-3.1 drafter failed on it): under bf16 autocast every TTT step hands the attention bf16 q, k and
    v, also when ``norm_output`` makes the carried hidden state float32."""
    seen = []

    def record(q, keys, values, *args):
        seen.append((q.dtype, keys.dtype, values.dtype))
        return real(q, keys, values, *args)

    real = ttt.ttt_attention
    monkeypatch.setattr(ttt, "ttt_attention", record)
    drafter, _ = tiny_drafter(**VARIANT_FLAGS.get(name, {}))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ttt_loss(drafter, _padded_batch(2, 9, pad=2), 3, kernels=TTTKernels("blocked", False))
    assert seen == [(torch.bfloat16,) * 3] * 3
