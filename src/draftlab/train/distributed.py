"""Data parallelism under ``torchrun``: rank and world size from its environment, gloo on the CPU,
NCCL on GPUs. Without ``torchrun`` (no WORLD_SIZE, or 1) everything runs in this one process."""

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


def init_world(device: str) -> World:
    """Join torchrun's process group (once) and return this process's place in it."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World(0, 1, 0)
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


def close_world(world: World) -> None:
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()
