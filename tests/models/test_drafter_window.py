"""Sliding-window and Qwen3-architecture drafters against the formula written plainly.

The window: a key at least W positions behind its query is dropped (transformers' ``q - k < W``, vLLM's
``window_size=(W - 1, 0)``), per layer. Every path of the drafter (the growing cache, the static cache
with trees, keep and crop, the batched cache) computes it; without the window the same weights give
other logits, so the comparisons can fail. Qwen3 drafters add an RMSNorm over each head's q and k
before RoPE, read from both layouts' tensor names.
"""

from __future__ import annotations

import pytest
import torch
from test_drafter_static import _script
from tiny_drafters import (
    VOCAB,
    H,
    drafter_tensors,
    qk_norms,
    reference,
    write_specforge,
    write_speculators,
)

from draftlab.errors import DraftlabError
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.drafter_batch import BatchDrafter

W = 5
N = 24  # tokens, several windows long
GEN = torch.Generator().manual_seed(11)
IDS = torch.randint(0, VOCAB, (N,), generator=GEN)
FEATS = torch.randn(N, 3 * H, generator=GEN)
TOL = {"rtol": 1e-4, "atol": 1e-4}


def window_fields(layers: int, types: list[str]) -> dict:
    return {"num_hidden_layers": layers, "layer_types": types, "sliding_window": W, "use_sliding_window": True}


def _folder(tmp_path, layers: int, types: list[str]):
    t = drafter_tensors(layers=layers)
    return t, write_specforge(tmp_path / "d", t, layers=layers, fields=window_fields(layers, types))


@pytest.mark.parametrize("types", [["sliding_attention"], ["sliding_attention", "full_attention"],
                                   ["full_attention", "sliding_attention"]], ids=["1", "sw+full", "full+sw"])
def test_cached_steps_equal_the_formula_with_each_layers_window(tmp_path, types: list[str]) -> None:
    t, folder = _folder(tmp_path, len(types), types)
    drafter = Eagle3Drafter.load(folder)
    assert drafter.windows == tuple(W if k == "sliding_attention" else None for k in types)
    steps = [drafter.forward(IDS[:9], FEATS[:9])] + [drafter.forward(IDS[i:i + 1], FEATS[i:i + 1]) for i in range(9, N)]
    logits, pre = reference(t, t["embed_tokens.weight"], IDS, list(FEATS), layers=len(types), windows=drafter.windows)
    torch.testing.assert_close(torch.cat([s.logits for s in steps]), logits, **TOL)
    torch.testing.assert_close(torch.cat([s.hidden for s in steps]), pre, **TOL)
    full, _ = reference(t, t["embed_tokens.weight"], IDS, list(FEATS), layers=len(types))
    assert (full - logits).abs().max() > 1e-2  # the window changes what the drafter computes


def test_tree_nodes_see_the_window_by_their_positions(tmp_path) -> None:
    t, folder = _folder(tmp_path, 1, ["sliding_attention"])
    drafter = Eagle3Drafter.load(folder)
    drafter.forward(IDS[:12], FEATS[:12])
    tree = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 1, 1]], dtype=torch.bool)
    step = drafter.forward(IDS[12:15], FEATS[12:15], positions=torch.tensor([12, 12, 13]), tree_mask=tree)
    for node, path in ((0, [12]), (2, [13, 14])):
        rows = list(range(12)) + path
        ref, _ = reference(t, t["embed_tokens.weight"], IDS[rows], list(FEATS[rows]), windows=(W,))
        torch.testing.assert_close(step.logits[node], ref[-1], **TOL)
    drafter.keep(torch.tensor([1, 2]))
    after = drafter.forward(IDS[15:16], FEATS[15:16])
    rows = list(range(12)) + [13, 14, 15]
    ref, _ = reference(t, t["embed_tokens.weight"], IDS[rows], list(FEATS[rows]), windows=(W,))
    torch.testing.assert_close(after.logits[0], ref[-1], **TOL)


@pytest.mark.parametrize("layers", [1, 2])
def test_static_cache_equals_the_growing_cache_with_a_window(tmp_path, layers: int) -> None:
    """The decoder's calls (a prefix past the largest bucket, trees dropped by keep, a padded extend, keep,
    crop), the static cache reading its slots' positions."""
    _, folder = _folder(tmp_path, layers, ["sliding_attention"] * layers)
    eager, static = Eagle3Drafter.load(folder), Eagle3Drafter.load(folder).use_static_cache(96)
    for got, want in zip(_script(static), _script(eager), strict=True):
        torch.testing.assert_close(got, want, **TOL)
    full = Eagle3Drafter.load(folder, windows=(None,) * layers)
    assert not torch.allclose(_script(full)[0], _script(Eagle3Drafter.load(folder))[0], atol=1e-3)


def test_batched_drafter_equals_one_row_at_a_time_with_a_window(tmp_path) -> None:
    _, folder = _folder(tmp_path, 1, ["sliding_attention"])
    drafter = Eagle3Drafter.load(folder)
    batch = BatchDrafter(drafter, batch_size=2, capacity=40)
    ids = torch.stack([IDS[:16], IDS[8:]])
    feats = torch.stack([FEATS[:16], FEATS[8:]])
    with torch.no_grad():
        first = batch.forward(ids[:, :12], feats[:, :12], torch.arange(12).expand(2, 12))
        second = batch.forward(ids[:, 12:], first.hidden[:, -4:], torch.arange(12, 16).expand(2, 4))
        for b in range(2):
            single = Eagle3Drafter.load(folder)
            one = single.forward(ids[b, :12], feats[b, :12])
            two = single.forward(ids[b, 12:], one.hidden[-4:])
            torch.testing.assert_close(first.logits[b], one.logits, **TOL)
            torch.testing.assert_close(second.logits[b], two.logits, **TOL)


def test_given_windows_override_the_config_and_bad_ones_are_refused(tmp_path) -> None:
    t, folder = _folder(tmp_path, 1, ["sliding_attention"])
    assert Eagle3Drafter.load(folder, windows=(None,)).windows == (None,)
    assert Eagle3Drafter.load(write_specforge(tmp_path / "plain", t), windows=(3,)).windows == (3,)
    for bad in [(0,), (W, W), (2.5,)]:
        with pytest.raises(DraftlabError, match="layer"):
            Eagle3Drafter.load(folder, windows=bad)


@pytest.mark.parametrize("layout", ["specforge", "speculators"])
def test_qwen3_drafter_normalises_each_heads_q_and_k(tmp_path, layout: str) -> None:
    """speculators' layout states the layer kind (transformer_layer_config.model_type qwen3); its tensors
    (``model.layers.0.self_attn.q_norm.weight``) and SpecForge's names (``midlayer.``) both load."""
    t = qk_norms(drafter_tensors())
    qwen3 = {"model_type": "qwen3"}
    if layout == "speculators":
        folder = write_speculators(tmp_path / "d", t, fields=qwen3)
    else:  # SpecForge's names inside a speculators config (what a hand conversion leaves)
        folder = write_speculators(tmp_path / "d", {}, fields=qwen3)
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in t.items()}, str(folder / "model.safetensors"))
    drafter = Eagle3Drafter.load(folder)
    assert drafter.config.layer_kind == "qwen3"
    step = drafter.forward(IDS[:9], FEATS[:9])
    logits, _ = reference(t, t["embed_tokens.weight"], IDS[:9], list(FEATS[:9]))
    torch.testing.assert_close(step.logits, logits, **TOL)
    plain = {k: v for k, v in t.items() if "_norm." not in k or "self_attn" not in k}
    without, _ = reference(plain, t["embed_tokens.weight"], IDS[:9], list(FEATS[:9]))
    assert (without - logits).abs().max() > 1e-2


def test_a_llama_drafter_with_qk_norm_tensors_is_refused(tmp_path) -> None:
    folder = write_speculators(tmp_path / "d", qk_norms(drafter_tensors()))
    with pytest.raises(DraftlabError, match="model_type: qwen3"):
        Eagle3Drafter.load(folder)
