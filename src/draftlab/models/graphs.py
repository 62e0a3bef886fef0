"""Replay a step function as CUDA graphs, one per input shape (token-count bucket), gpt-fast style.

A step of a batch-1 model is hundreds of small kernels whose launches, not the GPU, set its time. A
CUDA graph records the launches once and replays them with one call. Each graph reads its inputs
from fixed tensors (the caller's values are copied in) and writes fixed outputs; the step's other
state (the static KV cache) must also stay at fixed addresses. Inputs are padded to a few bucket
sizes so that a handful of graphs serves every token count up to the largest bucket.
"""

from __future__ import annotations

import gc
import inspect
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from draftlab.models.kernels import lean_capture_chosen

BUCKETS = (1, 2, 4, 8, 16, 32, 64)

Step = Callable[..., tuple[torch.Tensor, ...]]


@dataclass(frozen=True)
class Captures:
    """This process's CUDA graph captures so far: a cost a fresh process pays once per shape, which a
    run's timings would otherwise hide in its phases."""

    graphs: int = 0
    seconds: float = 0.0  # warm-up included
    warmup_seconds: float = 0.0  # the warm-up runs: first calls build torch.compile's, Triton's and cuDNN's kernels

    def __sub__(self, earlier: Captures) -> Captures:
        return Captures(self.graphs - earlier.graphs, self.seconds - earlier.seconds,
                        self.warmup_seconds - earlier.warmup_seconds)


_captures = Captures()


def captures() -> Captures:
    """This process's captures so far (subtract an earlier value for a run's own)."""
    return _captures


def bucket(n: int, buckets: tuple[int, ...] = BUCKETS) -> int | None:
    """The smallest bucket holding n tokens; None when n is larger than every bucket."""
    return next((b for b in buckets if b >= n), None)


def pad_to_bucket(width: int, ids: torch.Tensor, positions: torch.Tensor, tree: torch.Tensor,
                  *rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A step's n <= ``width`` tokens padded to its bucket's ``width``: ids with 0, positions and each of
    ``rows`` (per-token inputs, such as hidden states) with their last, and the tree [n, n] widened so
    that each pad attends only itself. The pads' outputs are dropped and their slots written over later.
    Returns (ids, positions, tree, *rows)."""
    n = ids.numel()
    if width == n:
        return ids, positions, tree, *rows
    pad = width - n
    square = torch.eye(width, dtype=torch.bool, device=tree.device)
    square[:n, :n] = tree
    return (torch.cat([ids, ids.new_zeros(pad)]), torch.cat([positions, positions[-1:].expand(pad)]), square,
            *(torch.cat([row, row[-1:].expand(pad, *row.shape[1:])]) for row in rows))


class GraphSteps:
    """CUDA graphs of ``step`` keyed by the shapes of its tensor inputs, captured on first use.

    A bound ``step`` is held weakly: its object usually owns this, and a reference cycle would leave
    the graphs (and the caches they write) to Python's cycle collector, which may run in the middle of
    another capture, where freeing a graph invalidates it."""

    def __init__(self, step: Step) -> None:
        self._step = weakref.WeakMethod(step) if inspect.ismethod(step) else lambda: step
        self.pool = torch.cuda.graph_pool_handle()
        self._graphs: dict[Hashable, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = {}

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Run ``step(*inputs)`` through its graph. The outputs are the graph's own tensors: valid until
        the next call with the same shapes."""
        return self.narrow(tuple((t.shape, t.dtype) for t in inputs), inputs, lambda: inputs)

    def narrow(self, key: Hashable, inputs: tuple[torch.Tensor, ...], padded: Callable[[], tuple[torch.Tensor, ...]]
               ) -> tuple[torch.Tensor, ...]:
        """Run the graph captured under ``key`` from ``padded()`` (the inputs widened to their bucket, made
        only to capture it) on ``inputs``, each written over the leading block of its buffer: no padding
        built per call, and no more copies than an exact fit. The rest of each buffer keeps what the
        capture or an earlier call left there, so the step must keep those rows out of every output row
        the caller reads (as :func:`pad_to_bucket`'s pads are)."""
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = self._capture(padded())
        graph, static_in, static_out = entry
        for dst, src in zip(static_in, inputs):
            (dst if dst.shape == src.shape else dst[tuple(slice(0, n) for n in src.shape)]).copy_(src)
        graph.replay()
        return static_out

    @property
    def step(self) -> Step:
        return self._step()

    def _capture(self, inputs: tuple[torch.Tensor, ...]):
        """Warm up on a side stream (the step's writes are the real call's own), then record with the
        cycle collector paused (it could free another object's graph mid-capture). Both are timed
        (:func:`captures`), the warm-up apart: a first call builds kernels there."""
        global _captures
        began = time.perf_counter()
        static_in = tuple(t.clone() for t in inputs)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.step(*static_in)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        warmed = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        collecting = gc.isenabled()
        gc.disable()
        try:
            with _recording(graph, self.pool, side):
                static_out = self.step(*static_in)
        finally:
            if collecting:
                gc.enable()
        torch.cuda.synchronize()
        done = time.perf_counter()
        _captures = Captures(_captures.graphs + 1, _captures.seconds + done - began,
                             _captures.warmup_seconds + warmed - began)
        return graph, static_in, static_out

    def __len__(self) -> int:
        return len(self._graphs)


@contextmanager
def _recording(graph: torch.cuda.CUDAGraph, pool: object, stream: torch.cuda.Stream) -> Iterator[None]:
    """Record ``graph`` from the work queued inside. ``torch.cuda.graph`` first synchronises the device
    and empties the allocator's caches, device and pinned host, at every capture, so the next steps
    allocate again what they had; ``DRAFTLAB_CAPTURE=lean`` records on ``stream`` without that
    (:func:`~draftlab.models.kernels.lean_capture_chosen`)."""
    if not lean_capture_chosen():
        with torch.cuda.graph(graph, pool=pool):
            yield
        return
    with torch.cuda.stream(stream):
        graph.capture_begin(pool)
        try:
            yield
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
