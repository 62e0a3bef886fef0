"""The MLA drafter (``Eagle3DeepseekV2ForCausalLM``) against transformers' DeepSeek-V3 attention with
2H-input down-projections (float32), and its cache paths against each other."""

from __future__ import annotations

import math

import pytest
import torch
from mla_reference import hf_attention, run_hf_attention
from test_drafter_static import _script
from tiny_drafters import VOCAB, H
from tiny_mla import EPS, NOPE, Q_RANK, ROPE, YARN, mla_config, mla_tensors, reference, write_mla

from draftlab.checkpoint import DrafterConfig
from draftlab.models.attention import attend
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.drafter_batch import BatchDrafter
from draftlab.models.mla import MlaAttention

TOL = dict(rtol=1e-5, atol=1e-5)
SHAPES = [(Q_RANK, YARN), (None, YARN), (Q_RANK, None)]
SHAPE_IDS = ["q_lora-yarn", "q_proj-yarn", "q_lora-plain"]


def _inputs(n: int, seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (n,), generator=g), torch.randn(n, 3 * H, generator=g)


@pytest.mark.parametrize(("q_lora_rank", "scaling"), SHAPES, ids=SHAPE_IDS)
def test_attention_equals_transformers_deepseek_v3(q_lora_rank, scaling) -> None:
    config = mla_config(q_lora_rank=q_lora_rank, rope_scaling=scaling)
    t = mla_tensors(q_lora_rank=q_lora_rank)
    drafter = Eagle3Drafter(DrafterConfig.from_dict(config))
    attn = drafter.midlayer.self_attn
    assert isinstance(attn, MlaAttention)
    attn.load_state_dict({k.removeprefix("midlayer.self_attn."): v for k, v in t.items()
                          if k.startswith("midlayer.self_attn.")})
    ref, rotary = hf_attention(t, config)
    n = 9
    x = torch.randn(n, 2 * H, generator=torch.Generator().manual_seed(1))
    pos = torch.arange(40, 40 + n)  # past YaRN's original window of 64 for the last rows
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    with torch.no_grad():
        got, (k, v) = attend(attn, x[None], drafter.rotary(x[None], pos[None]), None, allowed[None])
        want = run_hf_attention(ref, rotary, x, pos, allowed)
    torch.testing.assert_close(got[0], want, **TOL)
    assert k.shape == v.shape == (1, 4, n, NOPE + ROPE)  # values padded to the key width
    assert v[..., 12:].abs().max() == 0
    mscale = 0.1 * 0.6 * math.log(8.0) + 1.0 if scaling else 1.0
    assert attn.scale == pytest.approx(mscale ** 2 / math.sqrt(NOPE + ROPE), rel=1e-12)
    assert attn.scale == pytest.approx(ref.scaling, rel=1e-12)


@pytest.mark.parametrize("prefix", ["midlayer.", "layers.0."])
@pytest.mark.parametrize(("q_lora_rank", "scaling"), SHAPES, ids=SHAPE_IDS)
def test_drafter_equals_the_reference_with_positions_and_a_causal_mask(tmp_path, prefix, q_lora_rank,
                                                                       scaling) -> None:
    config = mla_config(q_lora_rank=q_lora_rank, rope_scaling=scaling)
    t = mla_tensors(q_lora_rank=q_lora_rank)
    drafter = Eagle3Drafter.load(write_mla(tmp_path / "d", t, config, prefix=prefix))
    n = 11
    ids, feats = _inputs(n)
    pos = torch.arange(30, 30 + n)
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    with torch.no_grad():
        logits, out, _ = drafter.forward_masked(ids[None], feats[None], pos[None], allowed[None])
    want_logits, want_pre, _ = reference(t, config, ids, feats, pos)
    torch.testing.assert_close(logits[0], want_logits, **TOL)
    torch.testing.assert_close(out[0], want_pre, **TOL)


@pytest.mark.parametrize("flags", [{"norm_before_residual": True}, {"fc_norm": True, "norm_output": True}],
                         ids=["norm_before_residual", "eagle3.1"])
def test_variants_apply_to_the_mla_drafter(tmp_path, flags) -> None:
    config = mla_config(**flags)
    t = mla_tensors(fc_norm=bool(flags.get("fc_norm")))
    drafter = Eagle3Drafter.load(write_mla(tmp_path / "d", t, config))
    ids, feats = _inputs(6)
    with torch.no_grad():
        first = drafter.forward(ids, feats)
        second = drafter.forward(ids[:1], first.hidden[-1:])
    want_logits, _, want_next = reference(t, config, ids, feats, torch.arange(6))
    torch.testing.assert_close(first.logits, want_logits, **TOL)
    torch.testing.assert_close(first.hidden, want_next, **TOL)
    rows = [*feats, want_next[-1]]  # target features, then the drafter's own output
    want_logits, _, _ = reference(t, config, torch.cat([ids, ids[:1]]), rows, torch.arange(7))
    torch.testing.assert_close(second.logits[0], want_logits[-1], **TOL)


@pytest.mark.parametrize(("q_lora_rank", "scaling"), SHAPES[:2], ids=SHAPE_IDS[:2])
def test_cached_steps_equal_the_whole_sequence(tmp_path, q_lora_rank, scaling) -> None:
    """forward step by step over its own cache == forward_masked over the sequence, causal."""
    config = mla_config(q_lora_rank=q_lora_rank, rope_scaling=scaling)
    drafter = Eagle3Drafter.load(write_mla(tmp_path / "d", mla_tensors(q_lora_rank=q_lora_rank), config))
    n = 10
    ids, feats = _inputs(n)
    with torch.no_grad():
        whole_logits, whole_out, _ = drafter.forward_masked(ids[None], feats[None], torch.arange(n)[None],
                                                            torch.ones(1, n, n, dtype=torch.bool).tril())
        steps = [drafter.forward(ids[:4], feats[:4])]
        steps += [drafter.forward(ids[i:i + 1], feats[i:i + 1]) for i in range(4, 7)]
        steps.append(drafter.forward(ids[7:], feats[7:]))
    torch.testing.assert_close(torch.cat([s.logits for s in steps]), whole_logits[0], **TOL)
    torch.testing.assert_close(torch.cat([s.hidden for s in steps]), whole_out[0], **TOL)


def test_static_cache_equals_the_growing_cache(tmp_path) -> None:
    folder = write_mla(tmp_path / "d", mla_tensors(), mla_config())
    eager = Eagle3Drafter.load(folder)
    static = Eagle3Drafter.load(folder).use_static_cache(96)
    with torch.no_grad():
        for got, want in zip(_script(static), _script(eager), strict=True):
            torch.testing.assert_close(got, want, **TOL)


def test_batched_drafter_equals_one_row_at_a_time(tmp_path) -> None:
    folder = write_mla(tmp_path / "d", mla_tensors(), mla_config())
    drafter = Eagle3Drafter.load(folder)
    batch = BatchDrafter(drafter, batch_size=2, capacity=32)
    rows = [_inputs(5, seed=s) for s in (1, 2)]
    ids, feats = torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])
    with torch.no_grad():
        first = batch.forward(ids, feats, torch.arange(5).expand(2, 5))
        second = batch.forward(ids[:, :2], first.hidden[:, -2:], torch.arange(5, 7).expand(2, 2))
        for b in range(2):
            single = Eagle3Drafter.load(folder)
            one = single.forward(ids[b], feats[b])
            two = single.forward(ids[b, :2], one.hidden[-2:])
            torch.testing.assert_close(first.logits[b], one.logits, **TOL)
            torch.testing.assert_close(second.logits[b], two.logits, **TOL)
            torch.testing.assert_close(second.hidden[b], two.hidden, **TOL)


def test_norm_eps_of_the_latent_norms_is_the_configs() -> None:
    attn = Eagle3Drafter(DrafterConfig.from_dict(mla_config())).midlayer.self_attn
    assert attn.q_a_layernorm.variance_epsilon == attn.kv_a_layernorm.variance_epsilon == EPS
