"""Split-KV attention (models/split_kv.py) against SDPA on the 8B shape's decode and verify steps.

    PYTHONPATH=src python benchmarks/split_kv_speed.py            # H200, about a minute
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/split_kv_speed.py --device cpu --dtype float16 --slots 128 --layers 2 --batches 1
                                                                  # checks the script on the CPU
                                                                  # (the interpreter's bfloat16 dot is wrong)

For each batch size, step (1 token: decode; 4: a 3/1/4 verify) and read width, ``--layers`` caches of
that width (so the keys stream from HBM, not from the 50 MB L2) are attended in turn inside one CUDA
graph, the way a step runs them: 32 query heads folded onto 8 kv heads of 128, bf16 (``--dtype``), a
mask that allows the first half of the slots (a cache being filled) and the step's own tokens. Ways:

- ``sdpa``: ``F.scaled_dot_product_attention`` with PyTorch's choice of kernel (cuDNN's on Hopper);
- ``sdpa-no-cudnn``: the same with cuDNN's kernel off (flash or memory-efficient);
- ``split-kv``: draftlab's kernels;
- ``sdpa+copies``: a step over a cache as the default path runs it, the step's keys and values copied in
  (two ``index_copy_``) before SDPA;
- ``split-kv+write``: the same step with ``DRAFTLAB_ATTENTION=split-kv``, the kernel writing them itself.

Prints microseconds per layer, the floor (the slots' keys and values at the copy bandwidth measured in
the same run) and each way's largest error against float64 attention of the same inputs.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from decode_profile import copy_bandwidth
from torch.nn.attention import sdpa_kernel

from draftlab.models import split_kv
from draftlab.models.devices import parse_dtype
from draftlab.models.kernels import ALLOWED

HEADS, KV_HEADS, DIM = 32, 8, 128


def sdpa(q, k, v, mask, tokens: int, new) -> torch.Tensor:
    groups = q.shape[2] // tokens
    m = mask.expand(q.shape[0], groups, tokens, -1).reshape(q.shape[0], 1, q.shape[2], -1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=DIM ** -0.5)


def sdpa_no_cudnn(q, k, v, mask, tokens: int, new) -> torch.Tensor:
    with sdpa_kernel(ALLOWED):
        return sdpa(q, k, v, mask, tokens, new)


def kernels(q, k, v, mask, tokens: int, new) -> torch.Tensor:
    return split_kv.attention(q, k, v, mask, tokens, DIM ** -0.5)


def sdpa_and_copies(q, k, v, mask, tokens: int, new) -> torch.Tensor:
    """A step over a cache as the default path runs it: two copies of the new entries, then SDPA."""
    new_k, new_v, slots = new
    k.index_copy_(2, slots, new_k)
    v.index_copy_(2, slots, new_v)
    return sdpa(q, k, v, mask, tokens, new)


def kernels_writing(q, k, v, mask, tokens: int, new) -> torch.Tensor:
    """The same with ``DRAFTLAB_ATTENTION=split-kv``: the kernel writes the new entries itself."""
    return split_kv.attention(q, k, v, mask, tokens, DIM ** -0.5, append=new)


WAYS = {"sdpa": sdpa, "sdpa-no-cudnn": sdpa_no_cudnn, "split-kv": kernels,
        "sdpa+copies": sdpa_and_copies, "split-kv+write": kernels_writing}
CPU_WAYS = ("sdpa", "split-kv", "split-kv+write")


def case(batch: int, tokens: int, slots: int, layers: int, device: torch.device, dtype: torch.dtype):
    """Folded queries, ``layers`` key/value caches (views of one buffer, as BatchKV's reads are), the
    mask, and the step's own entries (keys, values, slots: the ones the mask gives the step)."""
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(batch, KV_HEADS, HEADS // KV_HEADS * tokens, DIM, generator=gen, device=device).to(dtype)
    cache = torch.randn(layers, 2, batch, KV_HEADS, slots + 64, DIM, generator=gen, device=device).to(dtype)
    mask = torch.zeros(batch, 1, tokens, slots, dtype=torch.bool, device=device)
    mask[..., : slots // 2] = True
    mask[..., slots // 2: slots // 2 + tokens] = torch.ones(tokens, tokens, dtype=torch.bool, device=device).tril()
    new = torch.randn(2, batch, KV_HEADS, tokens, DIM, generator=gen, device=device).to(dtype)
    own = torch.arange(slots // 2, slots // 2 + tokens, device=device)
    return q, [(c[0, :, :, :slots], c[1, :, :, :slots]) for c in cache], mask, (new[0], new[1], own)


def seconds_per_layer(way, q, caches, mask, tokens: int, new, device: torch.device, repeats: int = 20) -> float:
    def sweep() -> None:
        for k, v in caches:
            way(q, k, v, mask, tokens, new)
    sweep()  # builds the kernels
    run = sweep
    if device.type == "cuda":
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            sweep()
        run = graph.replay
    if device.type != "cuda":
        began = time.perf_counter()
        for _ in range(repeats):
            run()
        return (time.perf_counter() - began) / repeats / len(caches)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    run()
    start.record()
    for _ in range(repeats):
        run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats / len(caches)


def error(way, q, k, v, mask, tokens: int, new) -> float:
    got = way(q, k, v, mask, tokens, new)  # a way that writes the new entries does so before the reference reads
    groups = q.shape[2] // tokens
    m = mask.expand(q.shape[0], groups, tokens, -1).reshape(q.shape[0], 1, q.shape[2], -1)
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=m, scale=DIM ** -0.5)
    return float((got.double() - exact).abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--slots", default="256,512,1024,2048,4096")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), parse_dtype(args.dtype)
    bandwidth = copy_bandwidth(args.device, 1.0) if device.type == "cuda" else float("nan")
    ways = WAYS if device.type == "cuda" else {name: WAYS[name] for name in CPU_WAYS}
    rows = []
    for batch in map(int, args.batches.split(",")):
        for tokens in (1, 4):
            for slots in map(int, args.slots.split(",")):
                q, caches, mask, new = case(batch, tokens, slots, args.layers, device, dtype)
                read = 2 * batch * KV_HEADS * slots * DIM * dtype.itemsize  # keys and values
                row = {"batch": batch, "tokens": tokens, "slots": slots, "floor_us": read / bandwidth * 1e6}
                for name, way in ways.items():
                    row[f"{name}_us"] = seconds_per_layer(way, q, caches, mask, tokens, new, device) * 1e6
                    row[f"{name}_err"] = error(way, q, *caches[0], mask, tokens, new)
                rows.append(row)
                if not args.json:
                    cells = "  ".join(f"{n} {row[f'{n}_us']:7.2f} us (err {row[f'{n}_err']:.1e})" for n in ways)
                    print(f"batch {batch:3d}  tokens {tokens}  slots {slots:5d}  "
                          f"floor {row['floor_us']:6.2f} us  {cells}")
    if args.json:
        print(json.dumps({"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                          "copy_bandwidth_gbs": bandwidth / 1e9, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
