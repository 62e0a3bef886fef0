"""The drafter's static-cache path computes what its growing (torch.cat) cache computes, also where its
steps replay as graphs that keep their buffers from call to call (a CPU stand-in for CUDA graphs)."""

from __future__ import annotations

import pytest
import torch
from tiny_drafters import VOCAB, H, drafter_tensors, write_specforge

from draftlab.errors import DraftlabError
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.graphs import GraphSteps


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


@pytest.fixture
def replaying(monkeypatch) -> None:
    """GraphSteps on CPU, each "graph" a rerun of the step over the buffers it was captured with: as on CUDA,
    a replay reads only those input buffers (whatever an earlier call left in them) and writes its outputs
    and the cache in place."""
    def capture(self: GraphSteps, inputs: tuple[torch.Tensor, ...]):
        static_in = tuple(t.clone() for t in inputs)
        static_out = self.step(*static_in)

        class Graph:
            def replay(_) -> None:
                for dst, src in zip(static_out, self.step(*static_in), strict=True):
                    dst.copy_(src)
        return Graph(), static_in, static_out
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(GraphSteps, "_capture", capture)


def test_graphs_written_in_place_match_the_growing_cache(tmp_path, replaying) -> None:
    """A padded step writes only its rows into its bucket's graph: the pad rows keep an earlier call's
    inputs (here a full bucket of 4 whose entries all see each other), and no real row may see them."""
    folder = write_specforge(tmp_path / "d", drafter_tensors())
    eager = Eagle3Drafter.load(folder)
    graphed = Eagle3Drafter.load(folder).use_static_cache(96)
    graphed._run_bucket = GraphSteps(graphed._static_step)  # as use_static_cache sets it on CUDA
    everything = torch.ones(4, 4, dtype=torch.bool)
    graphed.forward(torch.arange(4), torch.randn(4, 3 * H), tree_mask=everything)
    graphed.forward(torch.arange(4), torch.randn(4, H), tree_mask=everything)
    graphed.reset()
    for got, want in zip(_script(graphed), _script(eager), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(graphed._run_bucket) >= 3  # buckets of 4 (both hidden widths), 8 and 1
