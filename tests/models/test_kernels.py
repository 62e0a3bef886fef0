"""cuDNN attention is eligible only in the bucketed steps over preallocated caches, whose shapes recur
(the batch-1 static steps, the batched target's and drafter's steps of up to 64 tokens); every pass
over a growing cache (the batch-1 dynamic paths) and every step too long for a bucket runs with cuDNN
switched off, so it never builds a plan per new key length (models.kernels). With
``DRAFTLAB_ATTENTION=split-kv`` no pass allows it."""

from __future__ import annotations

import pytest
import torch
from tiny_drafters import VOCAB, drafter_tensors, write_specforge
from tiny_targets import tiny_target

from draftlab.engines.mtp_head import MtpServing
from draftlab.models import kernels
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.drafter_batch import BatchDrafter
from draftlab.models.mtp import load_mtp
from draftlab.models.target import TargetRunner
from draftlab.models.target_batch import BatchTarget

AUX = [0, 2, 4]


@pytest.fixture
def cudnn_seen(monkeypatch) -> list[bool]:
    """Whether cuDNN attention was enabled at each scaled-dot-product-attention call."""
    seen: list[bool] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return sdpa(*args, **kwargs)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    assert torch.backends.cuda.cudnn_sdp_enabled()  # PyTorch's default, which the static steps keep
    return seen


def test_target_passes_over_growing_caches_never_allow_cudnn(cudnn_seen: list[bool]) -> None:
    model = tiny_target("llama", attn="sdpa")
    dynamic = TargetRunner(model, aux_layers=AUX, cache="dynamic")
    dynamic.forward(torch.arange(5))
    dynamic.forward_batch(torch.arange(10).reshape(2, 5))
    assert len(cudnn_seen) >= 2 * 5 and not any(cudnn_seen)
    assert torch.backends.cuda.cudnn_sdp_enabled()  # restored afterwards


def test_batched_target_allows_cudnn_only_in_bucketed_steps(cudnn_seen: list[bool]) -> None:
    batch = BatchTarget(TargetRunner(tiny_target("llama"), aux_layers=AUX, cache="dynamic"), 2, 128)
    batch.forward(torch.arange(140).reshape(2, 70) % 97, torch.arange(70).repeat(2, 1))  # past every bucket
    long = list(cudnn_seen)
    cudnn_seen.clear()
    batch.forward(torch.arange(6).reshape(2, 3), 70 + torch.arange(3).repeat(2, 1))  # a bucket of 4
    assert long and not any(long)
    assert cudnn_seen and all(cudnn_seen)


def test_static_target_allows_cudnn_only_in_bucketed_steps(cudnn_seen: list[bool]) -> None:
    runner = TargetRunner(tiny_target("llama"), aux_layers=AUX, cache="static", max_len=128, graphs=False)
    runner.forward(torch.arange(70) % 100)  # longer than the largest bucket: runs uncaptured, any shape
    long = list(cudnn_seen)
    cudnn_seen.clear()
    runner.forward(torch.arange(3))  # a bucket of 4 over every slot: a shape that recurs
    assert long and not any(long)
    assert cudnn_seen and all(cudnn_seen)


def test_drafter_passes_allow_cudnn_only_in_bucketed_steps(tmp_path, cudnn_seen: list[bool]) -> None:
    drafter = Eagle3Drafter.load(write_specforge(tmp_path / "d", drafter_tensors()))
    features = torch.randn(70, drafter.fc.in_features)
    drafter.forward(torch.arange(4) % VOCAB, features[:4])  # the batch-1 dynamic path
    assert len(cudnn_seen) == 1 and not any(cudnn_seen)
    cudnn_seen.clear()
    batch = BatchDrafter(drafter, 2, 80)
    batch.forward(torch.arange(140).reshape(2, 70) % VOCAB, features.expand(2, -1, -1), torch.arange(70).repeat(2, 1))
    assert len(cudnn_seen) == 1 and not any(cudnn_seen)  # past every bucket
    cudnn_seen.clear()
    batch.forward(torch.arange(8).reshape(2, 4) % VOCAB, features[:4].expand(2, -1, -1), 70 + torch.arange(4).repeat(2, 1))
    assert len(cudnn_seen) == 1 and all(cudnn_seen)


def test_mtp_head_passes_never_allow_cudnn(mtp_toy, cudnn_seen: list[bool]) -> None:
    """The head's cache grows by concatenation: every pass meets a new key length (on an H100, a first decode
    over new lengths ran 2.5x slower with cuDNN's per-shape plans; RESULTS.md, session 23)."""
    runner, head = load_mtp(mtp_toy.target_dir, MtpServing("vllm"))
    tokens = torch.tensor(list(b"def keep(self):"))
    hidden = runner.forward(tokens).aux
    cudnn_seen.clear()
    head.reset()
    head.forward(tokens[1:8], hidden[:7])
    head.forward(tokens[8:], hidden[7:-1])
    assert len(cudnn_seen) == 2 and not any(cudnn_seen)


def test_with_split_kv_chosen_no_step_allows_cudnn(cudnn_seen: list[bool], monkeypatch) -> None:
    monkeypatch.setenv(kernels.ATTENTION_ENV, "split-kv")
    kernels.split_kv_chosen.cache_clear()
    try:
        runner = TargetRunner(tiny_target("llama"), aux_layers=AUX, cache="static", max_len=128, graphs=False)
        runner.forward(torch.arange(3))  # 8-wide heads: SDPA, in a bucket of 4
        batch = BatchTarget(TargetRunner(tiny_target("llama"), aux_layers=AUX, cache="dynamic"), 2, 128)
        batch.forward(torch.arange(6).reshape(2, 3), torch.arange(3).repeat(2, 1))
    finally:
        kernels.split_kv_chosen.cache_clear()
    assert len(cudnn_seen) >= 2 * 5 and not any(cudnn_seen)
