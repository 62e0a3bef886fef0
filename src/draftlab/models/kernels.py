"""Which fused attention kernels a pass may use: cuDNN's only where shapes recur.

On Hopper GPUs PyTorch prefers cuDNN's attention when a mask is given, and cuDNN builds an execution
plan for every new shape it meets: about 15-20 ms of host time per new key length on an H200. A pass
over a cache that grows (the batched decoder's, a dynamic cache's) meets a new key length on almost
every step, so nearly every step paid that, once per process: the batched decoder ran at a third of
its speed, and ran fast on a second pass over the same lengths (benchmarks/RESULTS.md, "Plan accuracy").

The static steps (bucketed token counts over every slot of a fixed cache, captured as CUDA graphs)
see a handful of shapes, so a plan is built once per shape, at capture; they keep PyTorch's own choice.
Every other pass runs inside :func:`attention_kernels`, whose kernels need no per-shape set-up.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from torch.nn.attention import SDPBackend, sdpa_kernel

ALLOWED = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention_kernels() -> AbstractContextManager[None]:
    """For the duration, scaled-dot-product attention may use the flash, memory-efficient or math kernel."""
    return sdpa_kernel(ALLOWED)
