"""The probe's automatic batch size rests on an estimate of one sequence's memory; its KV-cache term is
what the target's own cache holds per token, which for an MLA target no config field gives (its
head_dim is the rope width; transformers caches each head's key and value, or the compressed latent)."""

from __future__ import annotations

import pytest
import torch
from transformers import DeepseekV3ForCausalLM, LlamaConfig, LlamaForCausalLM

from draftlab.models.target import TargetRunner
from draftlab.probe.batching import cache_bytes_per_token
from draftlab.toy import mla


def _hf_cache_bytes_per_token(model: torch.nn.Module, tokens: int = 12) -> float:
    """What HF's own forward caches (keys and values, every layer), per token."""
    with torch.inference_mode():
        cache = model(torch.arange(tokens)[None], use_cache=True).past_key_values
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers) / tokens


def _llama() -> torch.nn.Module:
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=8))


@pytest.mark.parametrize("build", [_llama, lambda: DeepseekV3ForCausalLM(mla.target_config())], ids=["llama", "mla"])
def test_cache_estimate_is_what_the_target_caches(build):
    model = build().eval()
    estimate = cache_bytes_per_token(TargetRunner(model, cache="dynamic", aux_layers=[0, 1, 2]))
    assert estimate == _hf_cache_bytes_per_token(model, tokens=12)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_llama_cache_is_its_config_arithmetic(cache):
    """Against the config: 2 (key, value) x 3 layers x 2 kv heads x 8 dims x 4 bytes; a static runner
    (as on CUDA, where the estimate runs) measures on the model's own attention, not on its static one."""
    runner = TargetRunner(_llama().eval(), cache=cache, aux_layers=[0, 1, 2], max_len=32)
    assert cache_bytes_per_token(runner) == 2 * 3 * 2 * 8 * 4


def test_cuda_branch_of_the_automatic_batch_runs_on_a_static_runner(toy_pair, monkeypatch):
    """The whole estimate as it runs on CUDA (a static runner, the device's free memory), forced on the
    CPU: the branch that crashed on every GPU. More free memory never gives a smaller batch."""
    from draftlab.engines.sglang_flags import resolve_spec_flags
    from draftlab.models.pair import load_pair
    from draftlab.probe.batching import MAX_BATCH, auto_batch_size, row_bytes

    pair = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="static", max_len=256)
    runner, configs = pair.target, [resolve_spec_flags(3, 1, 4), resolve_spec_flags(5, 4, 8)]
    row = row_bytes(runner, pair.drafter, configs, 200)
    assert row > cache_bytes_per_token(runner) * 200 > 0
    monkeypatch.setattr(runner, "device", torch.device("cuda"))
    sizes = []
    for free in (row, 10 * row, 1000 * row):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device, free=free: (free, 2 * free))
        sizes.append(auto_batch_size(runner, pair.drafter, configs, 200, count=100))
    assert sizes == sorted(sizes) and sizes[0] == 1 and sizes[-1] == MAX_BATCH


@pytest.mark.parametrize("style", ["deepseek", "qwen3_next"])
def test_cuda_branch_sizes_a_batch_for_the_mtp_head(mtp_toy, monkeypatch, style):
    """``probe --drafter mtp --device cuda`` sized its batch from an EAGLE-3 drafter's config and crashed (the
    head's config has no kv heads): its one layer caches what one layer of the target does."""
    from draftlab.engines.mtp_head import MtpServing
    from draftlab.engines.sglang_flags import resolve_spec_flags
    from draftlab.models.mtp import load_mtp
    from draftlab.probe.batching import auto_batch_size, row_bytes

    folder = mtp_toy.target_dir if style == "deepseek" else mtp_toy.qwen3_next_dir
    runner, head = load_mtp(folder, MtpServing())  # a dynamic cache, as on CUDA
    configs = [resolve_spec_flags(3, 1, 3)]
    row = row_bytes(runner, head, configs, 200)
    assert row > cache_bytes_per_token(runner) * 200 > 0
    monkeypatch.setattr(runner, "device", torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (10 * row, 20 * row))
    assert auto_batch_size(runner, head, configs, 200, count=100) == 6
