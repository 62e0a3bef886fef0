"""Which fused attention kernels a pass may use (cuDNN's only where shapes recur), and whether
torch.compile and Triton can build kernels here (for the decode steps' and the trainer's fallbacks).

On Hopper GPUs PyTorch prefers cuDNN's attention when a mask is given, and cuDNN builds an execution
plan for every new shape it meets: about 15-20 ms of host time per new key length on an H200. A pass
over a cache that grows (a dynamic cache's) meets a new key length on almost every step, so nearly
every step paid that, once per process: the batched decoder, when it read its cache that way, ran at
a third of its speed (benchmarks/RESULTS.md, "Plan accuracy", session 3).

The bucketed steps over preallocated caches (token counts rounded up to a bucket; batch 1 reads every
slot, the batched caches read in 128-slot buckets; captured as CUDA graphs on CUDA) see a handful of
shapes, so a plan is built once per shape, at capture; they keep PyTorch's own choice. Every other
pass runs inside :func:`attention_kernels`, whose kernels need no per-shape set-up.

``DRAFTLAB_ATTENTION=split-kv`` chooses draftlab's own attention for the bucketed steps instead: the
split-KV kernels (:mod:`draftlab.models.split_kv`) for steps of up to 64 query rows per kv head, and no
cuDNN anywhere (a fresh process's first probe on an H200 took 10.9 s with cuDNN's per-shape plans and
4.2 s without; RESULTS.md, session 15). It is not the default until the GPU smoke run passes with it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext

from rich.console import Console
from torch.nn.attention import SDPBackend, sdpa_kernel

from draftlab.errors import DraftlabError

ALLOWED = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
ATTENTION_ENV = "DRAFTLAB_ATTENTION"
ATTENTION_CHOICES = ("torch", "split-kv")


def attention_kernels() -> AbstractContextManager[None]:
    """For the duration, scaled-dot-product attention may use the flash, memory-efficient or math kernel."""
    return sdpa_kernel(ALLOWED)


@functools.cache
def split_kv_chosen() -> bool:
    """Whether ``DRAFTLAB_ATTENTION`` asks for draftlab's attention (``split-kv``) rather than PyTorch's
    choice (``torch``, the default). Read once per process."""
    choice = os.environ.get(ATTENTION_ENV, "torch")
    if choice not in ATTENTION_CHOICES:
        raise DraftlabError(f"{ATTENTION_ENV}={choice!r} is not an attention choice; "
                            f"set it to {' or '.join(ATTENTION_CHOICES)}, or unset it")
    return choice == "split-kv"


def step_kernels() -> AbstractContextManager[None]:
    """The kernels a bucketed step's scaled-dot-product attention may use: PyTorch's choice, cuDNN
    included; with ``split-kv`` chosen, never cuDNN."""
    return attention_kernels() if split_kv_chosen() else nullcontext()


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps (its cause, else its context), outermost first."""
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def compile_failed(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is torch.compile failing to build a function (no Triton or no
    C compiler on this machine, say): raised by dynamo or inductor, before anything ran compiled."""
    return any(type(e).__module__.startswith(("torch._dynamo", "torch._inductor")) for e in _chain(exc))


def kernel_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) says a Triton kernel cannot run on this GPU at these shapes:
    flex attention's tiles asking for more shared memory than the device has. Nothing was computed."""
    return any("No valid triton configs" in str(e) or "out of resource" in str(e) for e in _chain(exc))


def compiler_message(exc: BaseException) -> str:
    """The first line of what the compiler itself said, under dynamo's wrapping of it."""
    root = exc
    while (inner := root.__cause__ or getattr(root, "inner_exception", None)) is not None:
        root = inner
    return (str(root).strip().splitlines() or [type(root).__name__])[0][:160]


def say_uncompiled(what: str, exc: BaseException) -> None:
    """The one line a step that goes on without torch.compile prints (``exc``: why it could not build)."""
    Console(stderr=True).print(f"[yellow]torch.compile cannot build {what} here ({compiler_message(exc)}); "
                               "running it without (the same tokens, slower)[/]", highlight=False, soft_wrap=True)
