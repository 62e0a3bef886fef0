"""Eagle3Drafter against the formula written plainly, over both checkpoint layouts."""

from __future__ import annotations

import pytest
import torch
from tiny_drafters import DRAFT_VOCAB, VOCAB, H, drafter_tensors, reference, write_specforge, write_speculators
from tiny_targets import tiny_target

from draftlab.errors import DraftlabError
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner

GEN = torch.Generator().manual_seed(3)
IDS = torch.randint(0, VOCAB, (9,), generator=GEN)
FEATS = torch.randn(9, 3 * H, generator=GEN)


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layers", [1, 2])
def test_cached_steps_equal_the_plain_formula(tmp_path, layers: int) -> None:
    t = drafter_tensors(layers=layers)
    drafter = Eagle3Drafter.load(write_specforge(tmp_path / "d", t, layers=layers))
    first = drafter.forward(IDS[:5], FEATS[:5])
    second = drafter.forward(IDS[5:8], FEATS[5:8])
    # a draft step: the drafter's own pre-norm output comes back as `hidden` (no fc)
    third = drafter.forward(IDS[8:9], second.hidden[-1:])
    hidden_rows = list(FEATS[:8]) + [second.hidden[-1]]
    logits, pre = reference(t, t["embed_tokens.weight"], IDS, hidden_rows, layers=layers)
    _close(torch.cat([first.logits, second.logits, third.logits]), logits)
    _close(torch.cat([first.hidden, second.hidden, third.hidden]), pre)
    assert drafter.cache_len == 9 and first.logits.shape == (5, DRAFT_VOCAB)


def test_masked_batch_path_equals_the_formula(tmp_path) -> None:
    t = drafter_tensors()
    drafter = Eagle3Drafter.load(write_specforge(tmp_path / "d", t))
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    logits, pre, _ = drafter.forward_masked(torch.stack([IDS, IDS]), torch.stack([FEATS, FEATS]),
                                            torch.arange(9).repeat(2, 1), causal.repeat(2, 1, 1))
    ref_logits, ref_pre = reference(t, t["embed_tokens.weight"], IDS, list(FEATS))
    _close(logits[1], ref_logits)
    _close(pre[0], ref_pre)


def test_tree_forward_and_keep(tmp_path) -> None:
    t = drafter_tensors()
    drafter = Eagle3Drafter.load(write_specforge(tmp_path / "d", t))
    drafter.forward(IDS[:5], FEATS[:5])
    # two siblings at the same depth, then a child of the second one
    tree_mask = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 1, 1]], dtype=torch.bool)
    step = drafter.forward(IDS[5:8], FEATS[5:8], positions=torch.tensor([5, 5, 6]), tree_mask=tree_mask)
    for node, path in ((0, [5]), (2, [6, 7])):
        rows = list(range(5)) + path
        ref, _ = reference(t, t["embed_tokens.weight"], IDS[rows], list(FEATS[rows]))
        _close(step.logits[node], ref[-1])
    drafter.keep(torch.tensor([1, 2]))
    assert drafter.cache_len == 7
    after = drafter.forward(IDS[8:9], FEATS[8:9])
    rows = [0, 1, 2, 3, 4, 6, 7, 8]
    ref, _ = reference(t, t["embed_tokens.weight"], IDS[rows], list(FEATS[rows]))
    _close(after.logits[0], ref[-1])


@pytest.mark.parametrize("layout", ["specforge-model-prefix", "speculators"])
def test_both_layouts_load_to_identical_outputs(tmp_path, layout: str) -> None:
    t = drafter_tensors()
    base = Eagle3Drafter.load(write_specforge(tmp_path / "base", t))
    other_dir = (write_speculators(tmp_path / "o", t) if layout == "speculators"
                 else write_specforge(tmp_path / "o", t, prefix="model."))
    other = Eagle3Drafter.load(other_dir)
    assert other.config.layout == ("speculators" if layout == "speculators" else "specforge")
    a, b = base.forward(IDS, FEATS), other.forward(IDS, FEATS)
    assert torch.equal(a.logits, b.logits) and torch.equal(a.hidden, b.hidden)


def test_norm_before_residual_computes_vllms_variant(tmp_path) -> None:
    t = drafter_tensors()
    drafter = Eagle3Drafter.load(write_speculators(tmp_path / "d", t, norm_before_residual=True))
    step = drafter.forward(IDS, FEATS)
    ref_logits, ref_pre = reference(t, t["embed_tokens.weight"], IDS, list(FEATS), norm_before_residual=True)
    _close(step.logits, ref_logits)
    _close(step.hidden, ref_pre)
    plain, _ = reference(t, t["embed_tokens.weight"], IDS, list(FEATS))
    assert not torch.allclose(step.logits, plain, atol=1e-3)  # the two variants really differ


def test_d2t_maps_draft_ids_to_target_ids(tmp_path) -> None:
    t = drafter_tensors()
    drafter = Eagle3Drafter.load(write_specforge(tmp_path / "d", t))
    ids = torch.tensor([0, 1, 2, 5, DRAFT_VOCAB - 1])
    assert drafter.to_target_ids(ids).tolist() == [i + i % 3 for i in ids.tolist()]
    del t["d2t"]
    identity = Eagle3Drafter.load(write_specforge(tmp_path / "no_d2t", t))
    assert torch.equal(identity.to_target_ids(ids), ids)  # absent d2t = identity, as both engines do


def test_embedding_comes_from_the_target_when_sizes_match(tmp_path) -> None:
    target = TargetRunner(tiny_target("llama"), aux_layers=[0, 1, 2])
    folder = write_specforge(tmp_path / "d", drafter_tensors(with_embed=False))
    shared = Eagle3Drafter.load(folder, target=target)
    assert shared.embed_tokens is target.embed_tokens
    with pytest.raises(DraftlabError, match="no embed_tokens.weight"):
        Eagle3Drafter.load(folder)
    own = Eagle3Drafter.load(write_specforge(tmp_path / "e", drafter_tensors()), target=target,
                             use_target_embedding=False)
    assert own.embed_tokens is not target.embed_tokens
    step = shared.forward(IDS[:3], target.forward(IDS[:3]).aux)
    assert torch.isfinite(step.logits).all()


def test_rope_scaling_is_read_from_the_drafter_config(tmp_path) -> None:
    t = drafter_tensors()
    plain = Eagle3Drafter.load(write_specforge(tmp_path / "a", t))
    yarn = Eagle3Drafter.load(write_specforge(tmp_path / "b", t, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}))
    assert yarn.rotary.rope_type == "yarn"
    pos = torch.arange(200, 209)
    assert not torch.allclose(plain.forward(IDS, FEATS, positions=pos).logits,
                              yarn.forward(IDS, FEATS, positions=pos).logits, atol=1e-3)


def test_bad_checkpoints_raise_one_line_errors(tmp_path) -> None:
    t = drafter_tensors()
    t["lm_head.weight"] = t["lm_head.weight"][:, :-1]
    with pytest.raises(DraftlabError, match="lm_head.weight.*shape"):
        Eagle3Drafter.load(write_specforge(tmp_path / "a", t))
    t = drafter_tensors()
    del t["midlayer.hidden_norm.weight"]
    with pytest.raises(DraftlabError, match="lacks tensor 'midlayer.hidden_norm.weight'"):
        Eagle3Drafter.load(write_specforge(tmp_path / "b", t))
    drafter = Eagle3Drafter.load(write_specforge(tmp_path / "c", drafter_tensors()))
    with pytest.raises(DraftlabError, match="width 7"):
        drafter.forward(IDS[:2], torch.zeros(2, 7))


def test_crop_drops_draft_steps_before_a_draft_extend(tmp_path) -> None:
    t = drafter_tensors()
    drafter = Eagle3Drafter.load(write_specforge(tmp_path / "d", t))
    first = drafter.forward(IDS[:5], FEATS[:5])
    step = drafter.forward(IDS[5:6], first.hidden[-1:])  # two chained draft steps
    drafter.forward(IDS[6:7], step.hidden)
    drafter.crop(5)
    extend = drafter.forward(IDS[5:7], FEATS[5:7])
    ref, _ = reference(t, t["embed_tokens.weight"], IDS[:7], list(FEATS[:7]))
    _close(extend.logits, ref[5:7])
    assert drafter.cache_len == 7
