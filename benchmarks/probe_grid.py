"""What probing a whole plan grid costs: ``probe_configs`` (one target pass for every config) against
one probe per config.

GPU (H200):
    python benchmarks/probe_grid.py --device cuda --model llama-3.1-8b
CPU smoke run:
    python benchmarks/probe_grid.py --device cpu --model tiny --prompts 2 --new-tokens 16

Models: random weights from a config (see runtime_speed.py), the target in dynamic-cache mode (the
probe's batched pass). The prompts' continuations are decoded once and timed on their own; then
(a) ``probe_configs`` over the default plan grid (continuations again, one target pass per batch,
the drafter and walk per config) and (b) ``probe_sequences`` once per config over the same
continuations (a target pass per config). Both give the same accept lengths (checked; random
weights accept almost nothing, which does not change the cost). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from runtime_speed import build

from draftlab.cost.plan import DEFAULT_GRID
from draftlab.engines import default_aux_layers
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.models.devices import synchronize
from draftlab.models.pair import LoadedPair
from draftlab.models.target import TargetRunner
from draftlab.probe.continuations import target_continuations
from draftlab.probe.probe import probe_configs, probe_sequences


def seconds(fn, device: str):
    synchronize(torch.device(device))
    start = time.perf_counter()
    out = fn()
    synchronize(torch.device(device))
    return out, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=8, help="Sequences per probe pass.")
    args = ap.parse_args()

    dtype = getattr(torch, args.dtype) if args.device != "cpu" else torch.float32
    model, drafter = build(args.model, args.device, dtype)
    runner = TargetRunner(model, aux_layers=default_aux_layers(model.config.num_hidden_layers), cache="dynamic")
    pair = LoadedPair(runner, drafter, runner.aux_layers)
    configs = [exact_spec_flags(*map(int, c.split("/"))) for c in DEFAULT_GRID.split(",")]
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, model.config.vocab_size, (args.prompt_tokens,), generator=gen).tolist()
               for _ in range(args.prompts)]
    steps = max(c.steps for c in configs)

    with torch.inference_mode(), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prompts.jsonl"
        path.write_text("".join(json.dumps({"input_ids": p}) + "\n" for p in prompts))
        target_continuations(runner, prompts[:1], 8, batch_size=1)  # warm-up: CUDA context, kernels
        conts, t_cont = seconds(lambda: target_continuations(runner, prompts, args.new_tokens + steps,
                                                             batch_size=args.batch_size), args.device)
        shared, t_shared = seconds(lambda: probe_configs(pair, tmp, path, configs, max_new_tokens=args.new_tokens,
                                                         batch_size=args.batch_size), args.device)
        separate, t_separate = [], 0.0
        for flags in configs:
            result, t = seconds(lambda: probe_sequences(runner, drafter, prompts, conts, flags,
                                                        max_new_tokens=args.new_tokens, batch_size=args.batch_size),
                                args.device)
            separate.append(result)
            t_separate += t
    differing = {c: sum(x.accept_lengths != y.accept_lengths for x, y in zip(a.results, b.results))
                 for c, a, b in zip(DEFAULT_GRID.split(","), shared, separate)}
    print(json.dumps({
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "model": args.model, "dtype": str(dtype), "prompts": args.prompts, "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens, "grid": DEFAULT_GRID, "continuations_s": round(t_cont, 3),
        "probe_configs_s": round(t_shared, 3), "probe_configs_without_continuations_s": round(t_shared - t_cont, 3),
        "probe_per_config_s": round(t_separate, 3), "same_accept_lengths": not any(differing.values()),
        "prompts_with_different_accept_lengths": differing,
        "mean_accept_length": {c: r.mean_accept_length for c, r in zip(DEFAULT_GRID.split(","), shared)},
        "mean_accept_length_per_config": {c: r.mean_accept_length for c, r in zip(DEFAULT_GRID.split(","), separate)},
    }, indent=2))


if __name__ == "__main__":
    main()
