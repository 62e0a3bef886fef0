"""TargetRunner against plain Hugging Face forwards, for every supported family."""

from __future__ import annotations

import pytest
import torch
from tiny_targets import COMMON, FAMILIES, tiny_target

from draftlab.errors import DraftlabError
from draftlab.models.target import TargetRunner

AUX = [0, 2, 4]  # includes the last layer (5 layers), whose HF hidden_states entry is post-norm
H = COMMON["hidden_size"]
# a draft tree over 6 nodes: parent of each node (-1 = attached to the prefix)
PARENTS = [-1, 0, 0, 1, 1, 2]


def _full(model, ids: torch.Tensor):
    with torch.no_grad():
        return model(ids[None], output_hidden_states=True)


def _path(node: int) -> list[int]:
    path = []
    while node != -1:
        path.append(node)
        node = PARENTS[node]
    return path[::-1]


def _tree_mask() -> torch.Tensor:
    n = len(PARENTS)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        mask[i, _path(i)] = True
    return mask


@pytest.mark.parametrize("family", list(FAMILIES))
def test_aux_states_and_incremental_logits_match_hf(family: str) -> None:
    model = tiny_target(family)
    runner = TargetRunner(model, aux_layers=AUX)
    ids = torch.randint(0, COMMON["vocab_size"], (12,), generator=torch.Generator().manual_seed(1))
    ref = _full(model, ids)
    steps = [runner.forward(ids[:7]), runner.forward(ids[7:8]), runner.forward(ids[8:])]
    logits = torch.cat([s.logits for s in steps])
    aux = torch.cat([s.aux for s in steps])
    assert runner.cache_len == 12
    torch.testing.assert_close(logits, ref.logits[0], rtol=1e-4, atol=1e-5)
    for i, k in enumerate(AUX[:-1]):
        torch.testing.assert_close(aux[:, i * H:(i + 1) * H], ref.hidden_states[k + 1][0], rtol=1e-4, atol=1e-5)
    last = aux[:, -H:]
    # canonical aux of the last layer is pre-norm: HF's last entry is that tensor after the final norm
    assert not torch.allclose(last, ref.hidden_states[-1][0], atol=1e-3)
    torch.testing.assert_close(model.get_decoder().norm(last), ref.hidden_states[-1][0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family,attn", [(f, None) for f in FAMILIES] + [("llama", "eager")])
def test_tree_forward_gives_each_node_its_own_path_and_keep_compacts(family: str, attn: str | None) -> None:
    model = tiny_target(family, attn=attn)
    runner = TargetRunner(model, aux_layers=AUX)
    gen = torch.Generator().manual_seed(2)
    prefix = torch.randint(0, COMMON["vocab_size"], (5,), generator=gen)
    tree = torch.randint(0, COMMON["vocab_size"], (len(PARENTS),), generator=gen)
    depth = torch.tensor([len(_path(i)) - 1 for i in range(len(PARENTS))])
    runner.forward(prefix)
    step = runner.forward(tree, tree_mask=_tree_mask(), positions=len(prefix) + depth)
    for node in range(len(PARENTS)):
        ref = _full(model, torch.cat([prefix, tree[_path(node)]]))
        torch.testing.assert_close(step.logits[node], ref.logits[0, -1], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(step.aux[node, :H], ref.hidden_states[AUX[0] + 1][0, -1], rtol=1e-4, atol=1e-5)

    accepted = _path(5)  # nodes 0, 2, 5
    runner.keep(torch.tensor(accepted))
    assert runner.cache_len == len(prefix) + len(accepted)
    nxt = torch.tensor([7, 11])
    after = runner.forward(nxt)
    ref = _full(model, torch.cat([prefix, tree[accepted], nxt]))
    torch.testing.assert_close(after.logits, ref.logits[0, -2:], rtol=1e-4, atol=1e-5)


def test_keep_rejects_out_of_range_and_reset_empties() -> None:
    runner = TargetRunner(tiny_target("llama"), aux_layers=AUX)
    runner.forward(torch.tensor([1, 2, 3]))
    with pytest.raises(DraftlabError, match="keep"):
        runner.keep(torch.tensor([3]))
    runner.reset()
    assert runner.cache_len == 0


def test_bad_aux_layer_and_missing_folder(tmp_path) -> None:
    with pytest.raises(DraftlabError, match="aux layer 5 does not exist"):
        TargetRunner(tiny_target("llama"), aux_layers=[1, 5])
    with pytest.raises(DraftlabError, match="no config.json"):
        TargetRunner.load(tmp_path)


def test_load_from_folder_uses_default_aux_layers_and_eos(tmp_path) -> None:
    model = tiny_target("llama")
    model.config.eos_token_id = 3
    model.generation_config.eos_token_id = [3, 4]  # engines take the union of both
    model.save_pretrained(tmp_path / "t")
    runner = TargetRunner.load(tmp_path / "t", dtype="bf16")
    assert runner.aux_layers == [1, 1, 1]  # engines' default [1, L//2 - 1, L - 4] for L = 5
    assert runner.eos_token_ids == {3, 4}
    assert runner.dtype == torch.bfloat16
    step = runner.forward(torch.tensor([5, 6, 7]))
    assert step.logits.dtype == torch.float32 and step.aux.shape == (3, 3 * H)


def test_crop_drops_everything_after_a_length() -> None:
    model = tiny_target("llama")
    runner = TargetRunner(model, aux_layers=AUX)
    runner.forward(torch.tensor([1, 2, 3, 4]))
    runner.forward(torch.tensor([5]))
    runner.forward(torch.tensor([6, 7]))
    runner.crop(4)
    step = runner.forward(torch.tensor([8]))
    ref = _full(model, torch.tensor([1, 2, 3, 4, 8]))
    torch.testing.assert_close(step.logits[0], ref.logits[0, -1], rtol=1e-4, atol=1e-5)
    with pytest.raises(DraftlabError, match="crop"):
        runner.crop(9)
