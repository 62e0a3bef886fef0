"""Which kernels a pass may use: the fused attention kernels (cuDNN's only where shapes recur), the
parts torch.compile builds (:func:`compiled_fn`) and whether it and Triton can build here (for the decode
steps' and the trainer's fallbacks); and the switches of the GPU paths waiting for their smoke run.

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

``DRAFTLAB_DRAFTER=compiled`` runs the drafter's work around attention (norms, RoPE, residuals, SiLU, the
head's norm and cast) through torch.compile wherever the target's verify is compiled (``generate``'s long
decodes on CUDA): a pass's ~60 small kernels become about 20. ``DRAFTLAB_CYCLE=pipelined`` runs greedy
speculative decoding's walk on the device, the host a cycle behind (:mod:`draftlab.decode.pipeline`).
``DRAFTLAB_CAPTURE=lean`` records CUDA graphs without emptying the allocator's caches at each capture
(a lead for the probe's unexplained 2.5 s of capture in session 15). All wait for the same smoke run.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from rich.console import Console
from torch.nn.attention import SDPBackend, sdpa_kernel

from draftlab.errors import DraftlabError

ALLOWED = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
ATTENTION_ENV = "DRAFTLAB_ATTENTION"
ATTENTION_CHOICES = ("torch", "split-kv")
DRAFTER_ENV = "DRAFTLAB_DRAFTER"
DRAFTER_CHOICES = ("eager", "compiled")
CYCLE_ENV = "DRAFTLAB_CYCLE"
CYCLE_CHOICES = ("host", "pipelined")
CAPTURE_ENV = "DRAFTLAB_CAPTURE"
CAPTURE_CHOICES = ("torch", "lean")


def attention_kernels() -> AbstractContextManager[None]:
    """For the duration, scaled-dot-product attention may use the flash, memory-efficient or math kernel."""
    return sdpa_kernel(ALLOWED)


def _chosen(env: str, choices: tuple[str, ...]) -> str:
    """The value of ``env``, one of ``choices`` (the first when it is unset)."""
    choice = os.environ.get(env, choices[0])
    if choice not in choices:
        raise DraftlabError(f"{env}={choice!r} is not one of the choices; "
                            f"set it to {' or '.join(choices)}, or unset it")
    return choice


@functools.cache
def split_kv_chosen() -> bool:
    """Whether ``DRAFTLAB_ATTENTION`` asks for draftlab's attention (``split-kv``) rather than PyTorch's
    choice (``torch``, the default). Read once per process."""
    return _chosen(ATTENTION_ENV, ATTENTION_CHOICES) == "split-kv"


@functools.cache
def drafter_compile_chosen() -> bool:
    """Whether ``DRAFTLAB_DRAFTER`` asks for the drafter's work around attention to be compiled wherever
    the target's verify is (``compiled``) rather than run eagerly (``eager``, the default). Read once
    per process."""
    return _chosen(DRAFTER_ENV, DRAFTER_CHOICES) == "compiled"


@functools.cache
def pipelined_chosen() -> bool:
    """Whether ``DRAFTLAB_CYCLE`` asks for greedy speculative decoding with the walk on the device and the
    host a cycle behind (``pipelined``: :mod:`draftlab.decode.pipeline`) rather than the walk on the host
    (``host``, the default). Read once per process."""
    return _chosen(CYCLE_ENV, CYCLE_CHOICES) == "pipelined"


@functools.cache
def lean_capture_chosen() -> bool:
    """Whether ``DRAFTLAB_CAPTURE`` asks for CUDA graphs recorded without ``torch.cuda.graph``'s
    synchronise and cache emptying at every capture (``lean``: :mod:`draftlab.models.graphs`) rather than
    through it (``torch``, the default). Read once per process."""
    return _chosen(CAPTURE_ENV, CAPTURE_CHOICES) == "lean"


def step_kernels() -> AbstractContextManager[None]:
    """The kernels a bucketed step's scaled-dot-product attention may use: PyTorch's choice, cuDNN
    included; with ``split-kv`` chosen, never cuDNN."""
    return attention_kernels() if split_kv_chosen() else nullcontext()


_compiled: dict[str, Callable[..., Any]] = {}


def compiled_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` through torch.compile, made once per process (the fused target layers' and the drafter's
    parts around attention). Sizes are compiled as dynamic once a second value is met (dynamo's
    default): a server's decode meets a batch size per group, a trainer a width per batch, and with
    fixed shapes every one was a recompile, dynamo's limit of 8 a warning and an uncompiled fallback.

    Inductor's default mode: its ``max-autotune`` GEMMs read the 8B shape's weights at batch 1 at
    1.05x the copy floor against cuBLAS's 1.16x (benchmarks/gemv_floor.py), but their tuning took
    15-28 s of every probe's and generate's start on an H200 for 0.2 ms per step (RESULTS.md).

    ``emulate_precision_casts``: inductor rounds a bf16 chain where eager rounds it, instead of keeping
    float32 intermediates, so a compiled step computes what the eager one does (bit for bit on the CPU;
    benchmarks/compile_numerics.py): the probe's uncompiled pass and a compiled decode or verify agree."""
    name = f"{fn.__module__}.{fn.__qualname__}"
    if name not in _compiled:
        _compiled[name] = torch.compile(fn, fullgraph=True, options={"emulate_precision_casts": True})
    return _compiled[name]


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
