"""GraphSteps' bookkeeping, on CPU with stand-ins for the CUDA graph API: one capture per input shape,
the cycle collector paused while recording, and no reference back to the step's owner (whose dead
graphs the collector could otherwise free in the middle of another capture, invalidating it)."""

from __future__ import annotations

import gc
import weakref
from contextlib import contextmanager

import pytest
import torch

from draftlab.models import graphs
from draftlab.models.graphs import GraphSteps


class _Stream:
    def wait_stream(self, other: object) -> None:
        pass


@pytest.fixture
def recording(monkeypatch) -> list[bool]:
    """Replace the CUDA graph API; return whether the collector was enabled at each capture."""
    seen: list[bool] = []

    @contextmanager
    def capture(graph: object, pool: object = None):
        seen.append(gc.isenabled())
        yield

    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: object())
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", _Stream)
    monkeypatch.setattr(torch.cuda, "stream", contextmanager(lambda stream: (yield)))
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: type("Graph", (), {"replay": lambda self: None})())
    monkeypatch.setattr(graphs.torch.cuda, "graph", capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    return seen


class _Owner:
    """Holds its GraphSteps, as BatchTarget and BatchDrafter do."""

    def __init__(self) -> None:
        self.calls = 0
        self.run = GraphSteps(self.step)

    def step(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        self.calls += 1
        return (x * 2,)


def test_one_capture_per_shape_with_the_collector_paused(recording: list[bool]) -> None:
    owner = _Owner()
    assert gc.isenabled()
    owner.run(torch.ones(2))
    owner.run(torch.ones(2))
    owner.run(torch.ones(3))
    assert len(owner.run) == 2 and recording == [False, False]
    assert owner.calls == 2 * 3  # per capture: two warm-up runs and the recorded one; replays run none
    assert gc.isenabled()  # restored


def test_graph_steps_do_not_keep_their_owner_alive(recording: list[bool]) -> None:
    owner = _Owner()
    owner.run(torch.ones(2))
    gone = weakref.ref(owner)
    gc_was = gc.isenabled()
    gc.disable()  # freed by reference counting alone, not by the collector
    try:
        del owner
        assert gone() is None
    finally:
        if gc_was:
            gc.enable()


def test_a_step_padded_to_its_bucket_keeps_its_tokens_and_walls_off_the_pads() -> None:
    ids, positions = torch.tensor([5, 6, 7]), torch.tensor([10, 11, 11])
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    hidden = torch.arange(6.0).reshape(3, 2)
    out_ids, out_positions, out_tree, out_hidden = graphs.pad_to_bucket(4, ids, positions, tree, hidden)
    assert out_ids.tolist() == [5, 6, 7, 0] and out_positions.tolist() == [10, 11, 11, 11]
    assert torch.equal(out_tree[:3, :3], tree) and out_tree[3].tolist() == [False, False, False, True]
    assert not out_tree[:3, 3].any()  # no real token sees a pad
    assert torch.equal(out_hidden, torch.cat([hidden, hidden[-1:]]))
    full = graphs.pad_to_bucket(3, ids, positions, tree)  # a full bucket: the inputs as given
    assert all(got is given for got, given in zip(full, (ids, positions, tree), strict=True))


def test_captures_are_counted_and_their_warm_up_told_apart(recording: list[bool], monkeypatch) -> None:
    """Each capture adds one graph and its seconds, of which the two warm-up runs' (where a first call
    builds its kernels); the probe's timings report a run's own (``graphs_captured``, ``graph_capture_s``,
    ``graph_warmup_s``). A fake clock that each run of the step moves by a second: 2 s of warm-up and
    3 s in all per capture."""
    from draftlab.probe.probe import Clock

    clock = [0.0]
    monkeypatch.setattr(graphs.time, "perf_counter", lambda: clock[0])

    def step(x: torch.Tensor) -> tuple[torch.Tensor]:
        clock[0] += 1
        return (x + 1,)

    run = GraphSteps(step)
    run(torch.ones(1))
    before, timed = graphs.captures(), Clock()
    run(torch.ones(2))
    run(torch.ones(3))
    run(torch.ones(3))  # a replay
    assert graphs.captures() - before == graphs.Captures(graphs=2, seconds=6.0, warmup_seconds=4.0)
    timings = timed.timings()
    assert (timings["graphs_captured"], timings["graph_capture_s"], timings["graph_warmup_s"]) == (2, 6.0, 4.0)


def test_a_lean_capture_records_without_emptying_the_caches(recording: list[bool], monkeypatch) -> None:
    """``DRAFTLAB_CAPTURE=lean`` records with ``capture_begin``/``capture_end`` into the steps' pool, the
    collector paused, and never through ``torch.cuda.graph`` (which empties the allocator's caches at
    every capture); replays are unchanged."""
    from draftlab.models import kernels

    calls: list[tuple] = []

    class Graph:
        def capture_begin(self, pool: object = None) -> None:
            calls.append(("begin", pool, gc.isenabled()))

        def capture_end(self) -> None:
            calls.append(("end",))

        def replay(self) -> None:
            calls.append(("replay",))

    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(("empty_cache",)))
    monkeypatch.setenv(kernels.CAPTURE_ENV, "lean")
    kernels.lean_capture_chosen.cache_clear()
    try:
        owner = _Owner()
        owner.run(torch.ones(2))
        owner.run(torch.ones(2))
    finally:
        kernels.lean_capture_chosen.cache_clear()
    assert [call[0] for call in calls] == ["begin", "end", "replay", "replay"]
    assert calls[0][1] is owner.run.pool and calls[0][2] is False
    assert recording == [] and owner.calls == 3 and gc.isenabled()
