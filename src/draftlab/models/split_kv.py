"""Split-KV attention (flash decoding) for steps with few query rows: decode, verify and draft.

PyTorch's fused attention kernels give each (batch row, head) one thread block that streams every key.
A batch-1 step of an 8B model has 8 kv heads, so 8 of an H200's 132 multiprocessors read the cache
while the rest wait: 13.5 us per layer for about 8 us of reading at 512 slots (benchmarks/RESULTS.md,
"Where the batch-1 step went", session 15). Here each (row, kv head) cuts its keys into ranges that
run side by side, each range keeps its own softmax maximum and sum (``_split``), and a second kernel
merges the ranges by log-sum-exp (``_merge``), as FlashDecoding does.

The query heads sharing a kv head arrive folded into query rows (:func:`static_kv.gqa_attention`), so
one key tile serves all of them; the mask is read per token and shared by the folded heads. Scores
and sums are float32; the probabilities meet the values in the values' dtype, as flash attention does.
Over a preallocated cache (:func:`static_kv.cached_attention`) the kernel also writes the step's own
keys and values into the cache, each range's program the slots it is about to read: the two copy
kernels per layer that wrote them (0.17 ms of a 5 ms batch-1 step on an H200) are gone.
Triton builds the kernels on first use; without Triton (or off CUDA) :func:`applies` is False and the
caller keeps SDPA. On the CPU the test suite runs the same kernels in Triton's interpreter.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os

import torch
from rich.console import Console

MAX_ROWS = {torch.bfloat16: 64, torch.float16: 64, torch.float32: 32}  # folded query rows per kv head (a
# decode, a verify or a draft pass of up to MAX_ROWS / groups tokens)
BLOCK = {torch.bfloat16: 32, torch.float16: 32, torch.float32: 16}  # keys per tile
HEAD_DIMS = (16, 32, 64, 128)  # tl.dot needs 16 or more; past 128 the tiles outgrow the registers
MAX_SPLITS = 64  # ranges per (row, kv head); the merge loops over them
# With these tiles and 8 warps nothing spills registers on sm_80 or sm_90 (tests/models/split_kv_builds.py
# builds the kernels for both on the CPU and reads ptxas' usage): 64-key tiles or 4 warps did (up to 824 bytes
# a thread in bfloat16), and float32 at 64 rows or with 32-key tiles (up to 7.9 KB; benchmarks/RESULTS.md)
NUM_WARPS, NUM_STAGES = 8, 2

_unbuildable: str | None = None  # why the kernels cannot build on this machine, once they failed to

if importlib.util.find_spec("triton") is not None:
    import triton
    import triton.language as tl
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    @triton.jit(do_not_specialize=["rows", "tokens", "keys", "span", "scale"])
    def _split(q, k, v, mask, acc_out, stats_out, new_k, new_v, slots,
               q_b, q_h, q_r, k_b, k_h, k_s, v_b, v_h, v_s, m_b, m_r, m_s, nk_b, nk_h, nk_t, nv_b, nv_h, nv_t,
               kv_heads, rows, tokens, keys, span, scale,
               R: tl.constexpr, D: tl.constexpr, BLOCK_S: tl.constexpr,
               BOOL_MASK: tl.constexpr, IEEE: tl.constexpr, APPEND: tl.constexpr):
        """One key range of one (batch row, kv head): its unnormalised output and its rows' max and sum.
        ``APPEND``: first write the step's own keys and values (``new_k``/``new_v`` [B, Hkv, tokens, D])
        into the slots ``slots`` that fall in this range."""
        bh = tl.program_id(0)
        part = tl.program_id(1)
        parts = tl.num_programs(1)
        b = (bh // kv_heads).to(tl.int64)  # a batch of long caches lies past 2**31 elements
        h = bh % kv_heads
        r = tl.arange(0, R)
        d = tl.arange(0, D)
        start = part * span
        end = tl.minimum(start + span, keys)
        if APPEND:  # the cache write, fused: each range's own program writes the slots it then reads
            for t0 in range(0, tokens, 16):
                t = t0 + tl.arange(0, 16)
                slot = tl.load(slots + t, mask=t < tokens, other=-1)
                mine = ((t < tokens) & (slot >= start) & (slot < end))[:, None]
                fresh = tl.load(new_k + b * nk_b + h * nk_h + t[:, None] * nk_t + d[None, :], mask=mine)
                tl.store(k + b * k_b + h * k_h + slot[:, None] * k_s + d[None, :], fresh.to(k.dtype.element_ty),
                         mask=mine)
                fresh = tl.load(new_v + b * nv_b + h * nv_h + t[:, None] * nv_t + d[None, :], mask=mine)
                tl.store(v + b * v_b + h * v_h + slot[:, None] * v_s + d[None, :], fresh.to(v.dtype.element_ty),
                         mask=mine)
            tl.debug_barrier()  # the block's writes are visible to all its threads before they read keys
        live = r < rows
        query = tl.load(q + b * q_b + h * q_h + r[:, None] * q_r + d[None, :], mask=live[:, None], other=0.0)
        token = r % tokens  # a folded row's own token: its mask row
        best = tl.full([R], float("-inf"), tl.float32)
        total = tl.zeros([R], tl.float32)
        acc = tl.zeros([R, D], tl.float32)
        for s0 in range(start, end, BLOCK_S):
            s = s0 + tl.arange(0, BLOCK_S)
            inside = s < end
            key = tl.load(k + b * k_b + h * k_h + s[:, None] * k_s + d[None, :], mask=inside[:, None], other=0.0)
            if IEEE:
                scores = tl.dot(query, tl.trans(key), input_precision="ieee") * scale
            else:
                scores = tl.dot(query, tl.trans(key)) * scale
            allowed = tl.load(mask + b * m_b + token[:, None] * m_r + s[None, :] * m_s,
                              mask=live[:, None] & inside[None, :], other=0)
            if BOOL_MASK:
                scores = tl.where(allowed != 0, scores, float("-inf"))
            else:
                scores = scores + allowed.to(tl.float32)
            scores = tl.where(inside[None, :], scores, float("-inf"))
            top = tl.maximum(best, tl.max(scores, 1))
            shift = tl.where(top == float("-inf"), 0.0, top)  # a row with nothing allowed yet stays at zero
            rescale = tl.exp(best - shift)
            p = tl.exp(scores - shift[:, None])
            total = total * rescale + tl.sum(p, 1)
            value = tl.load(v + b * v_b + h * v_h + s[:, None] * v_s + d[None, :], mask=inside[:, None], other=0.0)
            if IEEE:
                acc = acc * rescale[:, None] + tl.dot(p.to(value.dtype), value, input_precision="ieee")
            else:
                acc = acc * rescale[:, None] + tl.dot(p.to(value.dtype), value)
            best = top
        slot = bh * parts + part
        tl.store(acc_out + slot * R * D + r[:, None] * D + d[None, :], acc)
        tl.store(stats_out + slot * 2 * R + r, best)
        tl.store(stats_out + slot * 2 * R + R + r, total)

    @triton.jit(do_not_specialize=["rows", "parts"])
    def _merge(acc_in, stats_in, out, rows, parts, R: tl.constexpr, D: tl.constexpr):
        """Merge one (batch row, kv head)'s ranges by log-sum-exp; a row nothing allowed gives zeros."""
        bh = tl.program_id(0)
        r = tl.arange(0, R)
        d = tl.arange(0, D)
        top = tl.full([R], float("-inf"), tl.float32)
        for part in range(parts):
            top = tl.maximum(top, tl.load(stats_in + (bh * parts + part) * 2 * R + r))
        shift = tl.where(top == float("-inf"), 0.0, top)
        total = tl.zeros([R], tl.float32)
        acc = tl.zeros([R, D], tl.float32)
        for part in range(parts):
            slot = bh * parts + part
            weight = tl.exp(tl.load(stats_in + slot * 2 * R + r) - shift)
            total += weight * tl.load(stats_in + slot * 2 * R + R + r)
            acc += weight[:, None] * tl.load(acc_in + slot * R * D + r[:, None] * D + d[None, :])
        result = tl.where(total[:, None] > 0, acc / tl.where(total > 0, total, 1.0)[:, None], 0.0)
        tl.store(out + bh * rows * D + r[:, None] * D + d[None, :], result.to(out.dtype.element_ty),
                 mask=(r < rows)[:, None])


def available() -> bool:
    """Whether Triton is installed (it comes with CUDA builds of torch)."""
    return importlib.util.find_spec("triton") is not None


@functools.cache
def _gpu(index: int) -> tuple[bool, int]:
    """Whether GPU ``index`` runs the kernels (bfloat16 dots need compute capability 8.0 on), and its
    multiprocessor count."""
    props = torch.cuda.get_device_properties(index)
    return props.major >= 8, props.multi_processor_count


def _runs_on(device: torch.device) -> bool:
    """A GPU that runs the kernels; on the CPU only Triton's interpreter does (``TRITON_INTERPRET=1``,
    which the test suite sets)."""
    if not available():
        return False
    if device.type == "cuda":
        return _gpu(device.index or 0)[0]
    return device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


def applies(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor) -> bool:
    """Whether :func:`attention` serves folded query ``[B, Hkv, rows, D]`` over ``key``/``value`` with
    ``mask``: on a device that runs the kernels, with at most ``MAX_ROWS`` rows for its dtype, keys and
    values of one supported width stored densely along it, and a mask over exactly the keys."""
    dim = query.shape[-1]
    return (query.shape[2] <= MAX_ROWS.get(query.dtype, 0) and dim in HEAD_DIMS
            and key.shape[-1] == dim == value.shape[-1] and key.stride(-1) == 1 == value.stride(-1)
            and mask.shape[-1] == key.shape[2]
            and _unbuildable is None and _runs_on(query.device))


def split_count(ranges_wanted: int, keys: int, block: int) -> tuple[int, int]:
    """(ranges, keys per range) for ``keys`` keys cut into about ``ranges_wanted`` ranges, each a
    whole number of ``block``-key tiles, at most ``MAX_SPLITS``."""
    ranges = max(1, min(ranges_wanted, MAX_SPLITS, math.ceil(keys / block)))
    span = math.ceil(math.ceil(keys / ranges) / block) * block
    return math.ceil(keys / span), span


def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, tokens: int,
              scale: float, *, append: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
              ranges: int | None = None) -> torch.Tensor | None:
    """Softmax attention of folded query ``[B, Hkv, rows, D]`` (row ``g * tokens + i`` is query head g of
    the kv head, token i) over ``key``/``value`` ``[B, Hkv, S, D]``, with ``mask`` ``[B or 1, 1, tokens, S]``
    (bool, True = attend; or additive; its batch and token dims may be broadcast). Returns
    ``[B, Hkv, rows, D]`` in the query's dtype.

    ``append``: (keys, values ``[B, Hkv, tokens, D]``, slots ``[tokens]``): the step's own entries, written
    into ``key``/``value`` (views of a cache: they are written through) at those slots before they are read;
    slots past ``S`` are not written. ``ranges``: about how many key ranges per (row, kv head); by default
    enough to fill the GPU twice over.

    None where Triton cannot build the kernels on this GPU (a compiler error, or more shared memory
    or registers than it has): said once, and :func:`applies` is False from then on. The caller then
    runs its SDPA path, which writes whatever the kernel may have."""
    batch, kv_heads, rows, dim = query.shape
    keys = key.shape[2]
    if query.stride(-1) != 1:
        query = query.contiguous()
    if ranges is None:
        units = _gpu(query.device.index or 0)[1] if query.device.type == "cuda" else 4
        ranges = math.ceil(2 * units / (batch * kv_heads))
    block = BLOCK[query.dtype]
    parts, span = split_count(ranges, keys, block)
    padded = max(16, triton.next_power_of_2(rows))
    acc = torch.empty(batch * kv_heads * parts * padded * dim, dtype=torch.float32, device=query.device)
    stats = torch.empty(batch * kv_heads * parts * 2 * padded, dtype=torch.float32, device=query.device)
    out = torch.empty(batch, kv_heads, rows, dim, dtype=query.dtype, device=query.device)
    bool_mask = mask.dtype == torch.bool
    new_k, new_v, slots = append if append is not None else (key, value, acc)  # unread without APPEND
    if new_k.stride(-1) != 1 or new_v.stride(-1) != 1:
        new_k, new_v = new_k.contiguous(), new_v.contiguous()
    try:
        _split[(batch * kv_heads, parts)](
            query, key, value, mask.view(torch.uint8) if bool_mask else mask, acc, stats, new_k, new_v, slots,
            query.stride(0), query.stride(1), query.stride(2), key.stride(0), key.stride(1), key.stride(2),
            value.stride(0), value.stride(1), value.stride(2),
            mask.stride(0) if mask.shape[0] > 1 else 0, mask.stride(2) if mask.shape[2] > 1 else 0, mask.stride(3),
            new_k.stride(0), new_k.stride(1), new_k.stride(2), new_v.stride(0), new_v.stride(1), new_v.stride(2),
            kv_heads, rows, tokens, keys, span, scale,
            R=padded, D=dim, BLOCK_S=block, BOOL_MASK=bool_mask, IEEE=query.dtype == torch.float32,
            APPEND=append is not None, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        _merge[(batch * kv_heads,)](acc, stats, out, rows, parts, R=padded, D=dim)
    except (CompilationError, OutOfResources) as exc:
        _give_up(exc)
        return None
    return out


def _give_up(exc: Exception) -> None:
    """Say once why the kernels cannot build here, and stop offering them."""
    global _unbuildable
    _unbuildable = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
    Console(stderr=True).print(f"[yellow]draftlab's split-KV attention cannot build on this GPU ({_unbuildable}); "
                               "using PyTorch's attention (the same tokens, slower)[/]", highlight=False,
                               soft_wrap=True)
