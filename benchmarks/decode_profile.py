"""Where a batched decode step's time goes: the probe's continuations path against its HBM floor.

    python benchmarks/decode_profile.py --device cuda [--batch-size 64] [--prompt-len 128] [--new 256]

Builds the Llama-3.1-8B-shaped target with random bf16 weights (benchmarks/runtime_speed.py's
builder), decodes ``--new`` tokens after ``--batch-size`` prompts with
:func:`draftlab.probe.continuations.target_continuations` (the path the probe, and so ``assess``,
takes), and prints: ms per decode step (the decode's wall clock over its steps, prefill excluded by
timing a one-token run and subtracting), the floor (weights + the KV cache a step reads, over the
copy bandwidth measured in the same process), their ratio, and the ten CUDA kernels that take the
most time under torch.profiler over 32 steps. ``--device cpu --model tiny`` checks it runs.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from runtime_speed import build

from draftlab.models import TargetRunner
from draftlab.models.devices import synchronize
from draftlab.probe.continuations import target_continuations


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="llama-3.1-8b", choices=["llama-3.1-8b", "tiny"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new", type=int, default=256)
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    model, _ = build(args.model, args.device, dtype)
    runner = TargetRunner(model, cache="dynamic")
    cfg = model.config
    prompts = torch.randint(0, cfg.vocab_size, (args.batch_size, args.prompt_len)).tolist()

    def decode(n: int) -> float:
        synchronize(torch.device(args.device))
        start = time.perf_counter()
        target_continuations(runner, prompts, n, batch_size=args.batch_size)
        synchronize(torch.device(args.device))
        return time.perf_counter() - start

    decode(args.new)  # capture graphs, warm up
    full, one = min(decode(args.new) for _ in range(2)), min(decode(1) for _ in range(2))
    step_ms = (full - one) / (args.new - 1) * 1e3
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) \
        * torch.finfo(dtype).bits // 8
    capacity = args.prompt_len + args.new
    mean_read = args.batch_size * capacity * kv_per_token  # every step reads the whole cache (one graph)
    mean_filled = args.batch_size * (args.prompt_len + args.new / 2) * kv_per_token
    bandwidth = copy_bandwidth(args.device) if args.device.startswith("cuda") else float("nan")
    floor_ms = (weights + mean_filled) / bandwidth * 1e3
    row = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
           "torch": torch.__version__, "batch_size": args.batch_size, "prompt_len": args.prompt_len, "new": args.new,
           "step_ms": round(step_ms, 3), "weights_gb": round(weights / 1e9, 2),
           "kv_read_gb": round(mean_read / 1e9, 2), "kv_filled_gb": round(mean_filled / 1e9, 2),
           "copy_bandwidth_tb_s": round(bandwidth / 1e12, 3), "floor_ms": round(floor_ms, 3),
           "ratio": round(step_ms / floor_ms, 2)}
    print(json.dumps(row), flush=True)
    if not args.device.startswith("cuda"):
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        target_continuations(runner, prompts, 33, batch_size=args.batch_size)
        synchronize(torch.device(args.device))
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15), flush=True)


if __name__ == "__main__":
    main()
