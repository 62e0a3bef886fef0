"""The batch-1 decode's GEMMs against the copy bandwidth: how close each way of running an M = 1
matmul over the 8B shape's weights gets to the HBM floor (issue 27's batch-1 row).

    PYTHONPATH=src python benchmarks/gemv_floor.py                  # H200, 1-2 minutes
    PYTHONPATH=src python benchmarks/gemv_floor.py --device cpu --layers 2 --scale 16   # checks the script

For each weight of a Llama-3.1-8B layer (fused QKV, o_proj, fused gate_up, down_proj) and the lm_head,
``--layers`` copies (so the weights stream from HBM, not from the 50 MB L2) are multiplied by one
row in turn, inside one CUDA graph (no launch gaps), by:

- ``cublas``: ``F.linear``, what the decode step runs;
- ``autotune``: ``F.linear`` through torch.compile ``max-autotune-no-cudagraphs`` (inductor picks
  among cuBLAS and its Triton matmul templates by timing them);
- ``reduction``: ``(x * W).sum(-1)`` in float32 accumulation through torch.compile (inductor writes
  one Triton reduction kernel: a GEMV that reads W once);
- ``mv``: ``torch.mv(W, x)``, cuBLAS's GEMV entry point instead of its GEMM;
- ``cublaslt``: ``F.linear`` with cuBLASLt as torch's preferred BLAS library (its own kernel heuristics);
- ``triton``: a hand-written Triton GEMV (each program reduces BLOCK_N whole rows of W, no split-K, so
  the result is deterministic), its block sizes picked per shape by timing a few (where Triton imports).

Prints GB/s per weight and way, each as a fraction of the device-to-device copy bandwidth measured in
the same run, and the batch-1 step's GEMM time per way summed over 32 layers + lm_head, against the
floor of those bytes.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from decode_profile import copy_bandwidth

from draftlab.models.devices import synchronize

SHAPES = {"qkv": (6144, 4096), "o_proj": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}
PER_STEP = {"qkv": 32, "o_proj": 32, "gate_up": 32, "down": 32, "lm_head": 1}


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w)


def reduction(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.float() * w.float()).sum(-1).to(x.dtype)


def mv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.mv(w, x[0]).unsqueeze(0)


def cublaslt(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    previous = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        return F.linear(x, w)
    finally:
        torch.backends.cuda.preferred_blas_library(previous)


try:
    import triton
    import triton.language as tl

    @triton.jit
    def _gemv_kernel(w_ptr, x_ptr, y_ptr, n, k: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for start in range(0, k, BLOCK_K):
            cols = start + tl.arange(0, BLOCK_K)
            w = tl.load(w_ptr + rows[:, None] * k + cols[None, :], mask=(rows[:, None] < n) & (cols[None, :] < k),
                        other=0.0)
            x = tl.load(x_ptr + cols, mask=cols < k, other=0.0)
            acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
        tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=rows < n)

    TRITON_CONFIGS = [(bn, bk, warps) for bn in (4, 8, 16) for bk in (256, 512) for warps in (4, 8)]
    _chosen: dict[tuple[int, int], tuple[int, int, int]] = {}

    def _launch(x: torch.Tensor, w: torch.Tensor, config: tuple[int, int, int]) -> torch.Tensor:
        n, k = w.shape
        y = torch.empty(1, n, device=w.device, dtype=w.dtype)
        block_n, block_k, warps = config
        _gemv_kernel[(triton.cdiv(n, block_n),)](w, x, y, n, k, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps)
        return y

    def triton_gemv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if w.device.type != "cuda":
            raise RuntimeError("the Triton GEMV runs on CUDA only")
        if w.shape not in _chosen:
            copies = [torch.randn_like(w) for _ in range(max(2, -(-400_000_000 // (w.numel() * w.element_size()))))]
            timings = {config: seconds_per_call(lambda x, w, config=config: _launch(x, w, config), x, copies, w.device)
                       for config in TRITON_CONFIGS}
            del copies
            _chosen[w.shape] = min(timings, key=timings.get)
            print(f"triton GEMV {tuple(w.shape)}: block_n, block_k, warps = {_chosen[w.shape]}", flush=True)
        return _launch(x, w, _chosen[w.shape])
except ImportError:
    triton_gemv = None


WAYS = {"cublas": linear,
        "autotune": torch.compile(linear, mode="max-autotune-no-cudagraphs", dynamic=False),
        "reduction": torch.compile(reduction, dynamic=False),
        "mv": mv,
        "cublaslt": cublaslt}
if triton_gemv is not None:
    WAYS["triton"] = triton_gemv


def seconds_per_call(fn, x: torch.Tensor, weights: list[torch.Tensor], device: torch.device) -> float:
    """Mean seconds of one product, the copies run in turn, replayed as one CUDA graph on CUDA."""
    def sweep() -> None:
        for w in weights:
            fn(x, w)
    for _ in range(3):
        sweep()
    synchronize(device)
    run = sweep
    if device.type == "cuda":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            sweep()
        run = graph.replay
    times = []
    for _ in range(7):
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return sorted(times)[3] / len(weights)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=16, help="copies of each weight streamed in turn")
    parser.add_argument("--scale", type=int, default=1, help="divide every dimension (CPU check)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    bandwidth = copy_bandwidth(args.device, gib=4.0 if device.type == "cuda" else 0.25)
    rows, step, failed = [], {}, set()
    for name, (n, k) in SHAPES.items():
        n, k = n // args.scale, k // args.scale
        copies = 2 if name == "lm_head" else args.layers
        weights = [torch.randn(n, k, device=device, dtype=dtype) for _ in range(copies)]
        x = torch.randn(1, k, device=device, dtype=dtype)
        ref = F.linear(x, weights[0]).float()
        for way, fn in WAYS.items():
            row = {"weight": name, "shape": [n, k], "way": way}
            try:
                got = fn(x, weights[0]).float()
                row["max_rel_diff"] = float((got - ref).abs().max() / ref.abs().max())
                s = seconds_per_call(fn, x, weights, device)
                row.update(us=round(s * 1e6, 2), gb_s=round(n * k * weights[0].element_size() / s / 1e9, 1))
                row["of_copy"] = round(row["gb_s"] * 1e9 / bandwidth, 3)
                step[way] = step.get(way, 0.0) + s * PER_STEP[name]
            except Exception as e:  # noqa: BLE001 - one way that cannot build must not cost the others
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                failed.add(way)
            print(json.dumps(row), flush=True)
            rows.append(row)
        del weights
    size = torch.finfo(dtype).bits // 8
    floor = sum(n * k * size * PER_STEP[name] for name, (n, k) in SHAPES.items()) / args.scale**2 / bandwidth
    print(f"\ncopy bandwidth {bandwidth / 1e9:.0f} GB/s\n\n| weight | shape | " + " | ".join(WAYS) + " |\n"
          "|---|---|" + "---|" * len(WAYS))
    for name in SHAPES:
        cells = []
        for way in WAYS:
            r = next(r for r in rows if r["weight"] == name and r["way"] == way)
            cells.append(r["error"][:40] if "error" in r else f"{r['us']} us, {r['of_copy']:.0%}")
        shape = next(r["shape"] for r in rows if r["weight"] == name)
        print(f"| {name} | {shape[0]}x{shape[1]} | " + " | ".join(cells) + " |")
    summary = {way: {"gemm_ms_per_step": round(s * 1e3, 3), "of_floor": round(s / floor, 3)} for way, s in step.items()
               if way not in failed}
    print(f"\nbatch-1 step, GEMMs only (32 layers + lm_head): floor {floor * 1e3:.3f} ms; " +
          "; ".join(f"{w} {v['gemm_ms_per_step']} ms ({v['of_floor']}x)" for w, v in summary.items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"copy_bandwidth": bandwidth, "floor_ms": floor * 1e3, "rows": rows, "step": summary}, f, indent=1)


if __name__ == "__main__":
    main()
