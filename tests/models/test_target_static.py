"""The static-cache path of TargetRunner computes what the eager (dynamic cache) path computes."""

from __future__ import annotations

import pytest
import torch
from tiny_targets import COMMON, tiny_target

from draftlab.errors import DraftlabError
from draftlab.models.target import TargetRunner
from draftlab.models.target_static import ATTENTION, FAMILIES

AUX = [0, 2, 4]
V = COMMON["vocab_size"]
# a draft tree over 6 nodes: the parent of each node (-1 = the root's prefix), and each node's depth
PARENTS = [-1, 0, 0, 1, 1, 2]
DEPTH = torch.tensor([0, 1, 1, 2, 2, 2])


def _tree_mask() -> torch.Tensor:
    mask = torch.zeros(len(PARENTS), len(PARENTS), dtype=torch.bool)
    for i in range(len(PARENTS)):
        node = i
        while node != -1:
            mask[i, node] = True
            node = PARENTS[node]
    return mask


def _script(runner: TargetRunner) -> list[torch.Tensor]:
    """A prefill longer than the largest bucket, decode, a tree verify, keep, a padded step, crop, decode."""
    gen = torch.Generator().manual_seed(3)
    ids = lambda n: torch.randint(0, V, (n,), generator=gen)  # noqa: E731
    outs = []
    for step in (runner.forward(ids(70)), runner.forward(ids(1))):
        outs += [step.logits, step.aux]
    tree = runner.forward(ids(len(PARENTS)), tree_mask=_tree_mask(), positions=runner.cache_len + DEPTH)
    outs += [tree.logits, tree.aux]
    runner.keep(torch.tensor([0, 2, 5]))
    assert runner.cache_len == 74
    step = runner.forward(ids(3))  # padded to a bucket of 4
    outs += [step.logits, step.aux]
    runner.crop(72)
    step = runner.forward(ids(2))
    outs += [step.logits, step.aux]
    return outs


@pytest.mark.parametrize("family", FAMILIES)
def test_static_cache_matches_the_dynamic_cache(family: str) -> None:
    eager = TargetRunner(tiny_target(family), aux_layers=AUX, cache="dynamic")
    static = TargetRunner(tiny_target(family), aux_layers=AUX, cache="static", max_len=96)
    assert static.cache == "static" and eager.cache == "dynamic"
    for got, want in zip(_script(static), _script(eager), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_static_step_sees_only_its_own_path_and_the_kept_prefix() -> None:
    """Stale slots (dropped tree nodes, cropped entries) must not leak: compare with fresh full passes."""
    model = tiny_target("llama")
    runner = TargetRunner(tiny_target("llama"), aux_layers=AUX, cache="static", max_len=64)
    prefix, tree = torch.arange(5, 10), torch.arange(20, 26)
    runner.forward(prefix)
    runner.forward(tree, tree_mask=_tree_mask(), positions=5 + DEPTH)
    runner.keep(torch.tensor([0, 1, 4]))  # the path to node 4
    after = runner.forward(torch.tensor([40]))
    with torch.no_grad():
        ref = model(torch.cat([prefix, tree[[0, 1, 4]], torch.tensor([40])])[None]).logits[0, -1]
    torch.testing.assert_close(after.logits[0], ref, rtol=1e-5, atol=1e-5)


def test_auto_is_dynamic_on_cpu_and_static_refuses_what_it_cannot_run() -> None:
    assert TargetRunner(tiny_target("llama")).cache == "dynamic"
    with pytest.raises(DraftlabError, match="static cache supports"):
        TargetRunner(tiny_target("deepseek_v3"), cache="static")
    with pytest.raises(DraftlabError, match="unknown cache"):
        TargetRunner(tiny_target("llama"), cache="paged")
    with pytest.raises(DraftlabError, match="CUDA graphs"):
        TargetRunner(tiny_target("llama"), cache="static", graphs=True)
    runner = TargetRunner(tiny_target("llama"), cache="static", max_len=8)
    runner.forward(torch.arange(6))
    with pytest.raises(DraftlabError, match="larger max_len"):
        runner.forward(torch.arange(3))


@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_batched_pass_on_a_static_runner_matches_the_dynamic_one_and_leaves_its_cache_alone(family: str) -> None:
    """One loaded model serves the probe's batched pass and static decoding, in any order."""
    eager = TargetRunner(tiny_target(family), aux_layers=AUX, cache="dynamic")
    static = TargetRunner(tiny_target(family), aux_layers=AUX, cache="static", max_len=96)
    gen = torch.Generator().manual_seed(4)
    batch = torch.randint(0, V, (3, 11), generator=gen)
    prefix, after = torch.randint(0, V, (9,), generator=gen), torch.randint(0, V, (2,), generator=gen)
    for runner in (eager, static):
        runner.forward(prefix)
    got, want = static.forward_batch(batch), eager.forward_batch(batch)
    torch.testing.assert_close(got.aux, want.aux, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.hidden, want.hidden, rtol=1e-5, atol=1e-5)
    assert static.cache_len == 9
    assert static.model.config._attn_implementation == ATTENTION  # given back to the static step
    # the static step still runs on its own attention and sees the prefix cached before the batched pass
    step_static, step_eager = static.forward(after), eager.forward(after)
    torch.testing.assert_close(step_static.logits, step_eager.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(step_static.aux, step_eager.aux, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(static.forward_batch(batch).aux, want.aux, rtol=1e-5, atol=1e-5)
