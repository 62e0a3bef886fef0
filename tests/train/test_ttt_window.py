"""TTT of sliding-window and Qwen3-architecture drafters.

The loss and its gradients equal the unrolled decoder computation (tests/train/test_ttt.py's ``_naive``:
every row drafted through the drafter's own KV cache, which applies the window by position as the engines
serve it), with windows shorter than the rows and than the TTT steps; the window changes the loss. Flex
attention's block lists skip only blocks the window hides (its compiled forward with a window:
tests/train/test_ttt_kernels.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import drafter_config, random_rows, tiny_drafter
from test_ttt import LENGTH, B, N, _batch, _naive
from test_ttt_kernels import allowed_blocks

from draftlab.checkpoint import DrafterConfig
from draftlab.train import ttt_attention
from draftlab.train.ttt import TTTKernels, ttt_loss
from draftlab.train.ttt_attention import BLOCK, TTTLayout, block_lists


def window_config(window: int | None, kind: str = "llama") -> DrafterConfig:
    fields = {} if window is None else {"layer_types": ["sliding_attention"], "sliding_window": window,
                                        "use_sliding_window": True}
    return dataclasses.replace(DrafterConfig.from_dict(drafter_config(**fields)), layer_kind=kind)


def _check(config: DrafterConfig, monkeypatch) -> torch.Tensor:
    """ttt_loss (blocked kernel, 3-row chunks) against the naive unrolled decoder; returns the loss."""
    monkeypatch.setattr(ttt_attention, "CHUNK", 3)
    drafter, t2d = tiny_drafter(config=config)
    ids, mask, aux, logits = random_rows(B, N)
    result = ttt_loss(drafter, _batch(ids, mask, aux, logits, t2d), length=LENGTH,
                      kernels=TTTKernels("blocked", False))
    result.loss.backward()
    grads = {k: p.grad.clone() for k, p in drafter.named_parameters() if p.grad is not None}
    drafter.zero_grad()
    total, losses, correct = _naive(drafter, ids, mask, aux, logits, t2d, LENGTH)
    total.backward()
    torch.testing.assert_close(result.loss, total, rtol=1e-5, atol=1e-6)
    for got, want in zip(result.step_losses, losses, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert [int(c) for c in result.step_correct] == correct
    for name, p in drafter.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-4, atol=1e-6, msg=name)
    return total.detach()


@pytest.mark.parametrize("window", [1, 2, 4])  # 1 and 2: no longer than the 3 TTT steps (diagonal keys drop too)
def test_windowed_ttt_equals_the_unrolled_decoder(window, monkeypatch):
    windowed = _check(window_config(window), monkeypatch)
    full = _check(window_config(None), monkeypatch)
    assert not torch.allclose(windowed, full)


def test_qwen3_ttt_equals_the_unrolled_decoder_with_its_norms(monkeypatch):
    config = window_config(3, "qwen3")
    drafter, _ = tiny_drafter(config=config)
    assert drafter.midlayer.self_attn.q_norm is not None
    _check(config, monkeypatch)


@pytest.mark.parametrize("n", [130, 300])
def test_block_lists_skip_only_blocks_the_window_hides(n):
    """Every block holding an allowed (row, key) pair is computed, a block computed without the mask holds
    only allowed pairs, and the window leaves out blocks full attention computes."""
    attention = torch.ones(2, n, dtype=torch.bool)
    attention[1, n - 40:] = False
    for step in range(3):
        layout = TTTLayout.build(attention, length=3, window=100)
        some, every = allowed_blocks(layout, step)
        partial, full = block_lists(layout, step)
        assert not (some & ~(partial | full)).any() and not (full & ~every).any() and not (partial & full).any()
        if n > 2 * BLOCK:  # query blocks more than the window behind some key blocks
            wide_partial, wide_full = block_lists(TTTLayout.build(attention, length=3), step)
            assert (partial | full).sum() < (wide_partial | wide_full).sum()

