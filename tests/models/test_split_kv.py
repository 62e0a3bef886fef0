"""The split-KV attention kernels (models.split_kv) against float64 attention, run in Triton's interpreter
on the CPU (tests/conftest.py sets TRITON_INTERPRET=1 when there is no GPU): their ranges and merge, the
cache write they fuse, their fallback where Triton cannot build them, their builds for sm_80 and sm_90
(ptxas' resource usage), and ``DRAFTLAB_ATTENTION=split-kv`` routing a static decode and the probe
through them to SDPA's tokens and generate's accept lengths.

bfloat16 is left out: the interpreter's bfloat16 dot is wrong in Triton 3.6-3.9 (float16 exercises the
same casts of the probabilities)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import split_kv_builds as builds
import torch
import torch.nn.functional as F
import transformers as tf

from draftlab.decode.generate import generate
from draftlab.documents import provenance
from draftlab.errors import DraftlabError
from draftlab.models import kernels, split_kv
from draftlab.models.static_kv import StaticKV, cached_attention, gqa_attention
from draftlab.models.target import TargetRunner
from draftlab.probe.probe import probe

pytestmark = pytest.mark.skipif(not split_kv.available(), reason="needs Triton (the test extras install it)")

TOLERANCE = {torch.float32: 2e-6, torch.float16: 2e-3}


def _case(dtype: torch.dtype, *, batch: int = 2, kv_heads: int = 2, groups: int = 3, tokens: int = 5,
          keys: int = 300, dim: int = 32, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Query [B, H, tokens, D], keys and values [B, Hkv, S, D] (a strided view, as a cache's read is),
    and a bool mask [B, 1, tokens, S]: a cached prefix, a causal block of the step's own tokens, and
    some slots hidden at random (every row keeps its first slot)."""
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, kv_heads * groups, tokens, dim, generator=gen).to(dtype)
    cache = torch.randn(2, batch, kv_heads, keys + 40, dim, generator=gen).to(dtype)
    key, value = cache[0, :, :, :keys], cache[1, :, :, :keys]
    mask = torch.rand(batch, 1, tokens, keys, generator=gen) < 0.8
    own = torch.arange(keys - tokens, keys)
    mask[..., own] = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    mask[..., 0] = True
    return query, key, value, mask


def _exact(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
           scale: float) -> torch.Tensor:
    """The float64 answer, each query head over its own kv head."""
    groups = query.shape[1] // key.shape[1]
    k, v = (t.double().repeat_interleave(groups, dim=1) for t in (key, value))
    return F.scaled_dot_product_attention(query.double(), k, v, attn_mask=mask, scale=scale)


def _folded(query: torch.Tensor, kv_heads: int) -> torch.Tensor:
    batch, heads, tokens, dim = query.shape
    return query.reshape(batch, kv_heads, heads // kv_heads * tokens, dim)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("ranges", [1, 3, 64])
def test_kernels_match_exact_attention_over_any_number_of_key_ranges(dtype: torch.dtype, ranges: int) -> None:
    query, key, value, mask = _case(dtype)
    out = split_kv.attention(_folded(query, 2), key, value, mask, query.shape[2], 0.17, ranges=ranges)
    got = out.reshape(query.shape)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), _exact(query, key, value, mask, 0.17), rtol=0, atol=TOLERANCE[dtype])


def test_additive_masks_and_a_mask_shared_by_the_batch() -> None:
    query, key, value, mask = _case(torch.float32, batch=3, tokens=1, keys=200)
    shared = mask[:1]
    additive = torch.where(shared, 0.0, torch.finfo(torch.float32).min)
    out = split_kv.attention(_folded(query, 2), key, value, additive, 1, 0.2, ranges=4).reshape(query.shape)
    torch.testing.assert_close(out.double(), _exact(query, key, value, shared.expand_as(mask), 0.2), rtol=0, atol=2e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_kernels_write_the_steps_own_entries_into_the_cache_they_read(dtype: torch.dtype) -> None:
    """``append``: the step's keys and values land in the cache at its slots (those inside the read
    width; a padded token's slot past it is left alone), and attention sees them, as index_copy + SDPA."""
    query, key, value, mask = _case(dtype, tokens=4, keys=200)
    cache = torch.randn(2, 2, 2, 260, 32, generator=torch.Generator().manual_seed(1)).to(dtype)
    new = torch.randn(2, 2, 2, 4, 32, generator=torch.Generator().manual_seed(2)).to(dtype)
    slots = torch.tensor([150, 151, 152, 230])  # the last past the 200 slots read
    expected = cache.clone()
    expected[:, :, :, slots[:3]] = new[:, :, :, :3]
    fused = cache.clone()
    values = new[1].transpose(1, 2).contiguous().transpose(1, 2)  # laid out unlike the keys (as compiled code may)
    out = split_kv.attention(_folded(query, 2), fused[0, :, :, :200], fused[1, :, :, :200], mask, 4, 0.2,
                             append=(new[0], values, slots), ranges=5)
    assert torch.equal(fused, expected)
    torch.testing.assert_close(out.reshape(query.shape).double(),
                               _exact(query, expected[0, :, :, :200], expected[1, :, :, :200], mask, 0.2),
                               rtol=0, atol=TOLERANCE[dtype])


def test_ranges_merge_without_overflow_when_their_maxima_lie_far_apart() -> None:
    """Scores of +-150: a range's sum scaled by exp(its max - anything but the largest max) overflows."""
    query, key, value, mask = _case(torch.float32, keys=256)
    out = split_kv.attention(_folded(query, 2), key, value, mask, 5, 5.0, ranges=4).reshape(query.shape)
    assert out.isfinite().all()
    torch.testing.assert_close(out.double(), _exact(query, key, value, mask, 5.0), rtol=0, atol=2e-5)


def test_a_row_that_may_attend_nothing_gives_zeros_as_sdpa_does() -> None:
    query, key, value, mask = _case(torch.float32, tokens=3, keys=130)
    mask[1, :, 2] = False
    out = split_kv.attention(_folded(query, 2), key, value, mask, 3, 0.2, ranges=3).reshape(query.shape)
    assert torch.equal(out[1, :, 2], torch.zeros_like(out[1, :, 2]))
    torch.testing.assert_close(out.double(), _exact(query, key, value, mask, 0.2).nan_to_num(0.0), rtol=0, atol=2e-6)


@pytest.mark.parametrize("keys", [1, 63, 64, 65, 4095, 4160])
@pytest.mark.parametrize("wanted", [1, 5, 200])
@pytest.mark.parametrize("block", [16, 32])
def test_key_ranges_cover_every_key_once_in_whole_tiles(keys: int, wanted: int, block: int) -> None:
    parts, span = split_kv.split_count(wanted, keys, block)
    assert span % block == 0 and 1 <= parts <= min(wanted, split_kv.MAX_SPLITS)
    assert (parts - 1) * span < keys <= parts * span  # none empty, none missing
    assert parts == min(wanted, split_kv.MAX_SPLITS, math.ceil(keys / block)) or span > block


def test_applies_only_to_few_rows_of_supported_widths_over_exactly_the_masked_keys() -> None:
    query, key, value, mask = _case(torch.float32)
    q = _folded(query, 2)
    assert split_kv.applies(q, key, value, mask)
    assert not split_kv.applies(q.repeat(1, 1, 5, 1), key, value, mask)  # 75 rows: SDPA's blocks fill the GPU
    forty = q.repeat(1, 1, 3, 1)[:, :, :40]
    assert split_kv.applies(forty.half(), key.half(), value.half(), mask)
    assert not split_kv.applies(forty, key, value, mask)  # float32 tiles past 32 rows spill registers
    assert not split_kv.applies(q[..., :8], key[..., :8], value[..., :8], mask)  # too narrow for tl.dot
    assert not split_kv.applies(q, key, value, mask[..., :-1])
    assert not split_kv.applies(q, key.transpose(2, 3).contiguous().transpose(2, 3), value, mask)


@pytest.fixture
def split_kv_chosen(monkeypatch):
    monkeypatch.setenv(kernels.ATTENTION_ENV, "split-kv")
    kernels.split_kv_chosen.cache_clear()
    yield
    kernels.split_kv_chosen.cache_clear()


def test_gqa_attention_routes_small_steps_through_the_kernels(split_kv_chosen, monkeypatch) -> None:
    query, key, value, mask = _case(torch.float32, tokens=4)
    calls = []
    attention = split_kv.attention
    monkeypatch.setattr(split_kv, "attention", lambda *a, **k: calls.append(a[0].shape) or attention(*a, **k))
    got = gqa_attention(query, key, value, mask, 0.2)
    assert calls == [(2, 2, 12, 32)]
    torch.testing.assert_close(got.double(), _exact(query, key, value, mask, 0.2), rtol=0, atol=2e-6)
    long = torch.randn(2, 6, 22, 32)  # 66 folded rows: SDPA
    gqa_attention(long, key, value, mask[:, :, :1].expand(2, 1, 22, -1), 0.2)
    assert len(calls) == 1


def test_documents_say_whose_attention_computed_them(monkeypatch) -> None:
    assert provenance()["attention"] == "torch"
    monkeypatch.setenv(kernels.ATTENTION_ENV, "split-kv")
    assert provenance()["attention"] == "split-kv"


def test_an_unknown_attention_choice_is_one_line(monkeypatch) -> None:
    monkeypatch.setenv(kernels.ATTENTION_ENV, "flash")
    kernels.split_kv_chosen.cache_clear()
    try:
        with pytest.raises(DraftlabError, match="DRAFTLAB_ATTENTION='flash'.*torch or split-kv"):
            kernels.split_kv_chosen()
    finally:
        kernels.split_kv_chosen.cache_clear()


def test_a_static_decode_through_the_kernels_gives_sdpas_tokens(split_kv_chosen, monkeypatch) -> None:
    """A Llama with 16-wide heads decodes 12 tokens greedily on a static cache (the batch-1 path's
    steps: prefill, then one token a step) with the kernels and with SDPA: the same tokens, and logits
    within float32 rounding."""
    config = tf.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    calls = []
    attention = split_kv.attention
    monkeypatch.setattr(split_kv, "attention", lambda *a, **k: calls.append(1) or attention(*a, **k))

    def decode() -> tuple[list[int], torch.Tensor]:
        runner = TargetRunner(model, aux_layers=[0, 1], cache="static", max_len=64, graphs=False)
        step = runner.forward(torch.arange(7) % 97)
        tokens, logits = [], []
        for _ in range(12):
            logits.append(step.logits[-1])
            tokens.append(int(step.logits[-1].argmax()))
            step = runner.forward(torch.tensor(tokens[-1:]))
        return tokens, torch.stack(logits)

    tokens, logits = decode()
    kernel_calls = len(calls)
    monkeypatch.setenv(kernels.ATTENTION_ENV, "torch")
    kernels.split_kv_chosen.cache_clear()
    expected, expected_logits = decode()
    assert kernel_calls == 2 * 13 and len(calls) == kernel_calls  # every step and layer, then none
    assert tokens == expected and len(set(tokens)) > 1
    torch.testing.assert_close(logits, expected_logits, rtol=0, atol=1e-4)


def test_the_probe_through_the_kernels_equals_generate_on_the_toy_pair(split_kv_chosen, toy_pair, tmp_path,
                                                                      monkeypatch) -> None:
    """The probe's batched continuations and drafts (BatchKV steps of the target and the drafter, 16-wide
    heads) through the kernels give generate's accept lengths (its dynamic caches use SDPA), chain and tree."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n"
                               for t in ["def __init__(self, ", "import os\nimport sys\n\n"]))
    calls = []
    attention = split_kv.attention
    monkeypatch.setattr(split_kv, "attention", lambda *a, **k: calls.append(1) or attention(*a, **k))
    for steps, topk, tokens in [(3, 1, 4), (3, 2, 6)]:
        flags = dict(steps=steps, topk=topk, num_draft_tokens=tokens, max_new_tokens=24)
        got = probe(toy_pair.target_dir, toy_pair.drafter_dir, prompts, batch_size=2, **flags)
        ref = generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, **flags)
        assert [r.accept_lengths for r in got.results] == [r.accept_lengths for r in ref.results]
        assert ref.mean_accept_length > 1.5
    assert calls



@pytest.mark.skipif(not (split_kv.available() and builds.cuobjdump()), reason="needs Triton's NVIDIA backend")
def test_the_kernels_build_for_ampere_and_hopper_without_spilling() -> None:
    """The interpreter cannot show what the GPU compiler makes of the tiles. Triton ships ptxas, so the
    kernels are built here for sm_80 and sm_90 at the widest head, every row tile and each dtype, as
    :func:`split_kv.attention` launches them (tests/models/split_kv_builds.py, in a process without the
    interpreter): no register spills (stack or local memory), and shared memory that every such GPU has.
    (64-key tiles spilled at 32 and 64 rows; float32 at 64 rows.)"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, builds.__file__], env=env, capture_output=True, text=True, check=True)
    usage = json.loads(run.stdout)
    assert len(usage) == 2 * 2 * sum(int(math.log2(rows)) - 3 for rows in split_kv.MAX_ROWS.values())
    for build in usage:
        assert (build["stack"], build["local"]) == (0, 0), build
        assert build["shared"] <= builds.SMALLEST_SHARED, build


def test_kernels_that_cannot_build_fall_back_to_sdpa_once_said(split_kv_chosen, monkeypatch, capsys) -> None:
    """A GPU where Triton cannot build the kernels (here: more shared memory than it has) decodes on
    SDPA instead, with one line saying so, and the cache still gets the step's entries."""
    from triton.runtime.errors import OutOfResources

    class Unbuildable:
        """A kernel whose launch (at any grid) fails as Triton's does on too small a GPU."""

        def __getitem__(self, grid: tuple[int, ...]):
            def launch(*args: object, **kwargs: object) -> None:
                raise OutOfResources(133120, 101376, "shared memory")
            return launch
    monkeypatch.setattr(split_kv, "_split", Unbuildable())
    monkeypatch.setattr(split_kv, "_unbuildable", None)
    query, key, value, mask = _case(torch.float32, tokens=4, keys=200)
    cache = StaticKV(1, 2, 32, 200, dtype=torch.float32, device=torch.device("cpu"))
    cache.keys[0, :1], cache.values[0, :1] = key[:1], value[:1]
    slots = torch.arange(150, 154)
    cache.begin(slots, slots, cache.reads(200))
    new_k, new_v = torch.randn(2, 1, 2, 4, 32)
    first = cached_attention(cache, 0, query[:1], new_k, new_v, mask[:1], 0.2)
    second = cached_attention(cache, 0, query[:1], new_k, new_v, mask[:1], 0.2)
    said = capsys.readouterr().err
    assert said.count("split-KV attention cannot build") == 1 and "shared memory" in said
    assert not split_kv.applies(_folded(query, 2), key, value, mask)
    assert torch.equal(cache.keys[0, :, :, 150:154], new_k) and torch.equal(cache.values[0, :, :, 150:154], new_v)
    exact = _exact(query[:1], cache.keys[0], cache.values[0], mask[:1], 0.2)
    for out in (first, second):
        torch.testing.assert_close(out.double(), exact, rtol=0, atol=2e-6)
