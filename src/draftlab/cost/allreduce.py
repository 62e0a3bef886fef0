"""Tensor-parallel all-reduce latency for the verify's message sizes, over P local processes.

Under tensor parallelism every target layer ends its attention and its MLP with an all-reduce of
the activations (tokens x hidden), so one forward over B x N tokens costs ``2 x layers``
all-reduces of ``B x N x hidden`` elements. This module starts P processes the way torchrun does
(``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` in the environment, ``env://``
rendezvous), times ``all_reduce`` for each (batch size, tokens) point with warm-up and repeats
(the slowest rank counts), and returns the per-call latencies. NCCL on GPUs, gloo on the CPU.
"""

from __future__ import annotations

import os
import queue as queue_mod
import socket
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from draftlab.cost.measurement import Measurement, Timing
from draftlab.cost.profile import AllReduceCosts
from draftlab.errors import DraftlabError

ALLREDUCES_PER_LAYER = 2  # attention output and MLP output, Megatron-style tensor parallelism
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def measure_allreduce(
    *,
    tp: int,
    hidden_size: int,
    num_layers: int,
    batch_sizes: Sequence[int],
    tokens: Sequence[int],
    backend: str | None = None,
    dtype: str = "bfloat16",
    warmup: int = 5,
    repeats: int = 20,
    progress: bool = True,
    timeout_s: float = 300.0,
) -> AllReduceCosts:
    """Time one all-reduce of ``batch x tokens x hidden_size`` elements for every point."""
    if tp < 2:
        raise DraftlabError(f"--tp must be at least 2 to measure an all-reduce, got {tp}")
    if dtype not in _DTYPES:
        raise DraftlabError(f"all-reduce dtype {dtype!r}: choose one of {', '.join(_DTYPES)}")
    if hidden_size < 1 or num_layers < 1 or min(batch_sizes) < 1 or min(tokens) < 1:
        raise DraftlabError("hidden size, layers, batch sizes and tokens must be positive")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl" and torch.cuda.device_count() < tp:
        raise DraftlabError(
            f"--tp {tp} with nccl needs {tp} GPUs, this machine has {torch.cuda.device_count()}"
        )
    points = [(b, t) for b in batch_sizes for t in tokens]
    ctx = mp.get_context("spawn")
    results: queue_mod.Queue = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(
            target=_worker,
            args=(rank, tp, port, backend, points, hidden_size, dtype, warmup, repeats, results),
            daemon=True,
        )
        for rank in range(tp)
    ]
    for p in procs:
        p.start()
    measured: list[Measurement] = []
    try:
        with Progress(TextColumn("all-reduce {task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total}"),
                      console=Console(stderr=True), disable=not progress, transient=True) as bar:
            task = bar.add_task(f"tp={tp} {backend}", total=len(points))
            deadline = time.monotonic() + timeout_s
            while len(measured) < len(points):
                try:
                    kind, payload = results.get(timeout=1.0)
                except queue_mod.Empty:
                    dead = [p for p in procs if p.exitcode not in (None, 0)]
                    if dead or time.monotonic() > deadline:
                        raise DraftlabError(
                            f"all-reduce measurement over {tp} {backend} processes failed "
                            f"({'a process exited' if dead else 'timed out'})"
                        ) from None
                    continue
                if kind == "error":
                    raise DraftlabError(f"all-reduce measurement failed: {payload}")
                b, t, samples = payload
                measured.append(Measurement.of(b, t, Timing.of(samples)))
                bar.advance(task)
        for p in procs:
            p.join(timeout=30)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    return AllReduceCosts(
        tp=tp,
        backend=backend,
        dtype=dtype,
        hidden_size=hidden_size,
        calls_per_forward=ALLREDUCES_PER_LAYER * num_layers,
        points=measured,
    )


def _worker(
    rank: int,
    world: int,
    port: int,
    backend: str,
    points: list[tuple[int, int]],
    hidden: int,
    dtype: str,
    warmup: int,
    repeats: int,
    results: queue_mod.Queue,
) -> None:
    """One rank: torchrun-style environment, env:// rendezvous, then time every point."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    try:
        torch.set_num_threads(1)
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend, init_method="env://")
        check = torch.full((4,), float(rank + 1), device=device)
        dist.all_reduce(check)
        if not torch.all(check == world * (world + 1) / 2):
            raise RuntimeError(f"all_reduce returned {check.tolist()}, not the sum over ranks")
        for b, t in points:
            x = torch.ones(b * t, hidden, dtype=_DTYPES[dtype], device=device)
            for _ in range(warmup):
                dist.all_reduce(x)
            samples = torch.tensor([_time_once(x, device) for _ in range(repeats)],
                                   dtype=torch.float64, device=device)
            dist.all_reduce(samples, op=dist.ReduceOp.MAX)  # the slowest rank decides
            if rank == 0:
                results.put(("point", (b, t, samples.cpu().tolist())))
        dist.barrier()
        dist.destroy_process_group()
    except Exception as exc:  # reported to the parent as one line
        results.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
        raise


def _time_once(x: torch.Tensor, device: torch.device) -> float:
    dist.barrier()
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize(device)
        return float(start.elapsed_time(end))
    start_s = time.perf_counter()
    dist.all_reduce(x)
    return (time.perf_counter() - start_s) * 1000.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
