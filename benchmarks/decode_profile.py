"""Where a batched decode step's time goes: the plain decode loop's variants against the HBM floor.

    python benchmarks/decode_profile.py --device cuda [--batch-size 64 1] [--prompt-len 128] [--new 256]

Builds the Llama-3.1-8B-shaped target with random bf16 weights (benchmarks/runtime_speed.py's
builder) and, for each batch size, decodes ``--new`` tokens after that many random prompts with
:func:`draftlab.decode.plain_decode.plain_decode` (the loop the probe, and so ``assess``, ``train
regenerate`` and ``generate --no-draft --batch-size`` run) in three variants of the
:class:`~draftlab.models.target_batch.BatchTarget`: ``unfused`` (HF's layers, separate q/k/v and
gate/up GEMMs, in the CUDA graphs), ``fused`` (one QKV and one gate_up GEMM per layer) and
``fused+compiled`` (their elementwise parts torch.compiled: the default on CUDA).
For each it prints ms per decode step
(the decode's wall clock over its steps, the prefill excluded by timing a one-token run and
subtracting), the floor (weights + the KV cache the step's rows have filled, on average, over the
copy bandwidth measured in the same process), their ratio, and the KV the read buckets make it read;
a variant that fails prints its one-line error and the others run on. Then the CUDA kernels that
take the most time under torch.profiler over 32 steps of each batch size's fastest variant.
``--device cpu --model tiny`` checks it runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import time

import torch
from runtime_speed import build

from draftlab.decode.plain_decode import plain_decode
from draftlab.models import TargetRunner
from draftlab.models.devices import synchronize
from draftlab.models.static_kv import BatchKV
from draftlab.models.target_batch import BatchTarget

VARIANTS = {"unfused": {"fused": False, "compile": False}, "fused": {"fused": True, "compile": False},
            "fused+compiled": {"fused": True, "compile": True}}


def copy_bandwidth(device: str, gib: float = 4.0) -> float:
    """Bytes per second of a device-to-device copy (read + write counted), median of 5."""
    n = int(gib * 2**30) // 2
    a = torch.empty(n, dtype=torch.bfloat16, device=device)
    b = torch.empty_like(a)
    times = []
    for _ in range(6):
        synchronize(torch.device(device))
        start = time.perf_counter()
        b.copy_(a)
        synchronize(torch.device(device))
        times.append(time.perf_counter() - start)
    del a, b
    return 2 * n * 2 / sorted(times[1:])[2]


def step_ms(target: BatchTarget, prompts: list[list[int]], new: int) -> float:
    """Milliseconds per decode step: a warm-up (graph captures, compiles), then the best of two
    ``new``-token decodes less the best of two one-token ones (the prefill), over ``new - 1`` steps."""
    device = target.device

    def decode(n: int) -> float:
        synchronize(device)
        start = time.perf_counter()
        plain_decode(target, prompts, n)
        synchronize(device)
        return time.perf_counter() - start

    decode(new)
    full, one = min(decode(new) for _ in range(2)), min(decode(1) for _ in range(2))
    return (full - one) / (new - 1) * 1e3


def kernel_table(target: BatchTarget, prompts: list[list[int]]) -> str:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        plain_decode(target, prompts, 33)
        synchronize(target.device)
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="llama-3.1-8b", choices=["llama-3.1-8b", "tiny"])
    parser.add_argument("--batch-size", type=int, nargs="+", default=[64, 1])
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    model, _ = build(args.model, args.device, dtype)
    runner = TargetRunner(model, cache="dynamic")
    cfg = model.config
    bandwidth = copy_bandwidth(args.device) if cuda else float("nan")
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) \
        * torch.finfo(dtype).bits // 8
    capacity = args.prompt_len + args.new
    print(json.dumps({"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
                      "weights_gb": round(weights / 1e9, 2), "copy_bandwidth_tb_s": round(bandwidth / 1e12, 3),
                      "prompt_len": args.prompt_len, "new": args.new}), flush=True)
    best: dict[int, str] = {}
    for batch in args.batch_size:
        prompts = torch.randint(0, cfg.vocab_size, (batch, args.prompt_len)).tolist()
        filled = batch * (args.prompt_len + args.new / 2) * kv_per_token
        floor_ms = (weights + filled) / bandwidth * 1e3
        kv = BatchKV(0, 1, 1, 1, capacity, dtype=dtype, device=torch.device("cpu"))  # the read widths alone
        slots = range(args.prompt_len, capacity - 1)
        read = batch * sum(kv.read_width(s + 1) for s in slots) / len(slots) * kv_per_token
        times: dict[str, float] = {}
        for name in args.variants:
            flags = VARIANTS[name]
            row = {"batch_size": batch, "variant": name}
            try:
                target = BatchTarget(runner, batch, capacity, **flags)
                times[name] = step_ms(target, prompts, args.new)
                row |= {"step_ms": round(times[name], 3), "floor_ms": round(floor_ms, 3),
                        "ratio": round(times[name] / floor_ms, 2), "kv_filled_gb": round(filled / 1e9, 3),
                        "kv_read_gb": round(read / 1e9, 3)}
            except Exception as exc:  # noqa: BLE001 (one variant failing, a compile error, must not hide the others)
                row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            finally:
                target = None
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
            print(json.dumps(row), flush=True)
        if times:
            best[batch] = min(times, key=times.get)
            print(f"batch {batch}: " + "  ".join(f"{n} {t:.2f} ms ({t / floor_ms:.2f}x)" for n, t in times.items())
                  + f"  floor {floor_ms:.2f} ms", flush=True)
    if not cuda:
        return
    for batch, name in best.items():
        prompts = torch.randint(0, cfg.vocab_size, (batch, args.prompt_len)).tolist()
        target = BatchTarget(runner, batch, capacity, **VARIANTS[name])
        plain_decode(target, prompts, 33)  # captures
        print(f"top CUDA kernels, batch {batch}, {name}:\n{kernel_table(target, prompts)}", flush=True)
        target = None
        gc.collect()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
