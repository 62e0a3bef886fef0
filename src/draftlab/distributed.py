"""Data parallelism under ``torchrun``: rank and world size from its environment, gloo on the CPU,
NCCL on GPUs. Without ``torchrun`` (no WORLD_SIZE, or 1) everything runs in this one process.
Training, capture and regeneration shard their data by rank; so does the probe (its prompts)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int

    @property
    def main(self) -> bool:
        return self.rank == 0


ONE = World(0, 1, 0)  # a run without torchrun


def init_world(device: str) -> World:
    """Join torchrun's process group (once) and return this process's place in it."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return ONE
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        cuda = device.startswith("cuda")
        if cuda:
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if cuda else "gloo")
    return World(rank, size, local)


def barrier(world: World) -> None:
    if world.size > 1:
        dist.barrier()


def all_sum(world: World, t: torch.Tensor) -> torch.Tensor:
    """The sum of ``t`` over every rank (``t`` itself with one process)."""
    if world.size > 1:
        t = t.clone()
        dist.all_reduce(t)
    return t


def gather(world: World, obj: object) -> list[object]:
    """Every rank's ``obj``, in rank order (``[obj]`` with one process): small Python results, pickled."""
    if world.size == 1:
        return [obj]
    out: list[object] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def close_world(world: World) -> None:
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def leave() -> None:
    """Leave torchrun's process group, if this process joined one (a command's last step)."""
    if dist.is_initialized():
        dist.destroy_process_group()
