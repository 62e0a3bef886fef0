"""The drafter's static-cache path computes what its growing (torch.cat) cache computes."""

from __future__ import annotations

import pytest
import torch
from tiny_drafters import VOCAB, H, drafter_tensors, write_specforge

from draftlab.errors import DraftlabError
from draftlab.models.drafter import Eagle3Drafter


def _script(drafter: Eagle3Drafter) -> list[torch.Tensor]:
    """Extend past the largest bucket, draft passes with a tree mask dropped by keep([]), a padded
    extend, keep of a path, crop and extend again: the decoder's calls."""
    gen = torch.Generator().manual_seed(5)
    ids = lambda n: torch.randint(0, VOCAB, (n,), generator=gen)  # noqa: E731
    feats = lambda n: torch.randn(n, 3 * H, generator=gen)  # noqa: E731
    outs = []
    step = drafter.forward(ids(70), feats(70))
    outs += [step.logits, step.hidden]
    own = step.hidden[-1:]
    for _ in range(2):  # two draft passes over siblings and a child, each dropped afterwards
        tree = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 1, 1]], dtype=torch.bool)
        step = drafter.forward(ids(3), own.expand(3, -1), positions=drafter.cache_len + torch.tensor([0, 0, 1]),
                               tree_mask=tree)
        drafter.keep(torch.empty(0, dtype=torch.long))
        outs += [step.logits, step.hidden]
        own = step.hidden[-1:]
    step = drafter.forward(ids(3), feats(3))  # padded to a bucket of 4
    drafter.keep(torch.tensor([0, 2]))
    outs += [step.logits, step.hidden]
    step = drafter.forward(ids(1), step.hidden[-1:])
    drafter.crop(72)
    step = drafter.forward(ids(5), feats(5))
    outs += [step.logits, step.hidden]
    assert drafter.cache_len == 77
    return outs


@pytest.mark.parametrize("layers", [1, 2])
def test_static_cache_matches_the_growing_cache(tmp_path, layers: int) -> None:
    folder = write_specforge(tmp_path / "d", drafter_tensors(layers=layers), layers=layers)
    eager = Eagle3Drafter.load(folder)
    static = Eagle3Drafter.load(folder).use_static_cache(96)
    for got, want in zip(_script(static), _script(eager), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_static_cache_refuses_overflow_and_graphs_on_cpu(tmp_path) -> None:
    drafter = Eagle3Drafter.load(write_specforge(tmp_path / "d", drafter_tensors()))
    with pytest.raises(DraftlabError, match="CUDA graphs"):
        drafter.use_static_cache(16, graphs=True)
    drafter.use_static_cache(4)
    drafter.forward(torch.arange(3), torch.zeros(3, 3 * H))
    with pytest.raises(DraftlabError, match="larger max_len"):
        drafter.forward(torch.arange(2), torch.zeros(2, 3 * H))
