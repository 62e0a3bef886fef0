"""The probe against its floor, and against batch-1 ``generate`` with the same flags (issue 27's probe row).

    PYTHONPATH=src python benchmarks/probe_floor.py --out $OUT/probe_floor.json          # H200: the 8B shape
    PYTHONPATH=src python benchmarks/probe_floor.py --device cpu --pair tiny --prompts 8 \\
        --prompt-len 16 --new 24 --generate-prompts 2                                   # checks the script

1. Writes the pair to disk as a user's folders (``gpu_smoke.py``'s builder: random bf16 weights arranged for
   real acceptance) and ``--prompts`` prompts of ``--prompt-len`` tokens inside the draft vocabulary.
2. ``draftlab probe ... --steps 3 --topk 1 --num-draft-tokens 4 --max-new-tokens N --json`` in its own
   process, ``--probe-runs`` times; their timings give the continuations and the probe, load excluded.
   The fastest run is the one compared: on a fresh machine the first process also fills the CUDA
   driver's cache of JIT-compiled kernels (``CUDA_CACHE_DISABLE=1`` makes every run pay that), which
   later processes read.
3. ``draftlab generate`` with the same flags (batch 1, ``--ignore-eos``) on ``--generate-prompts`` of them; its
   tokens/s over the probe's tokens is what generate would take for all of them.
4. The floor, from the copy bandwidth and the matmul peak measured in this process:
   - the continuations: N + steps batched decode steps, each reading the target's weights and the KV cache
     filled so far once (bytes / copy bandwidth), batch by batch of the probe's batch size;
   - the probe: one target pass over every prompt + continuation and ``steps`` drafter passes over the
     same tokens, at the matmul peak (2 x parameters x tokens FLOPs; the embeddings are gathered, not
     multiplied).

Prints one JSON object per measurement and a Markdown table: each part, its floor, the ratio, and the
probe's speed-up over generate. Then (``--no-phases`` skips it) the probe's own pass split into the
target's pass, its argmax and the drafts, timed in this process, with the drafts' kernel profile.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from decode_profile import copy_bandwidth
from gpu_smoke import DRAFT_VOCAB, ENV, SHAPES, write_random_pair

from draftlab.models.devices import synchronize


def matmul_peak(device: str, dtype: torch.dtype) -> float:
    """FLOP/s of a large square matmul, median of 5 after a warm-up."""
    n = 8192 if device.startswith("cuda") else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    times = []
    for _ in range(6):
        synchronize(torch.device(device))
        start = time.perf_counter()
        a @ b
        synchronize(torch.device(device))
        times.append(time.perf_counter() - start)
    return 2 * n**3 / sorted(times[1:])[2]


def cli(argv: list[str]) -> dict:
    """``python -m draftlab argv --json`` in its own process; its JSON document."""
    print("$ draftlab " + " ".join(argv), file=sys.stderr, flush=True)
    out = subprocess.run([sys.executable, "-m", "draftlab", *argv, "--json"], capture_output=True, text=True,
                         env=ENV, check=False)
    if out.returncode:
        raise SystemExit(f"draftlab {argv[0]} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


def parameters(folder: Path) -> dict[str, int]:
    """Elements per tensor name in a folder's safetensors files (headers only)."""
    from draftlab.checkpoint import open_checkpoint

    return {name: info.numel for name, info in open_checkpoint(folder).tensors.items()}


def floors(shape: dict, draft_params: int, target_params: dict[str, int], args: argparse.Namespace, batch: int,
           bandwidth: float, peak: float) -> dict[str, float]:
    """Seconds at the floor for the continuations and for the probe (module docstring)."""
    element = 2 if args.dtype == "bfloat16" else 4
    weights = sum(target_params.values()) * element
    head_dim = shape.get("head_dim") or shape["hidden_size"] // shape["num_attention_heads"]
    kv_per_token = 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * head_dim * element
    steps = args.new + args.steps
    decode = 0.0
    for start in range(0, args.prompts, batch):
        rows = min(batch, args.prompts - start)
        decode += sum(weights + rows * (args.prompt_len + s) * kv_per_token for s in range(1, steps + 1)) / bandwidth
    tokens = args.prompts * (args.prompt_len + args.new)
    multiplied = sum(n for name, n in target_params.items() if "embed_tokens" not in name)
    probe = 2 * tokens * (multiplied + args.steps * draft_params) / peak
    return {"continuations_floor_s": decode, "probe_floor_s": probe}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--pair", default="llama-3.1-8b", choices=["llama-3.1-8b", "tiny"])
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on the CPU")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new", type=int, default=256, help="new tokens per prompt (--max-new-tokens)")
    parser.add_argument("--steps", type=int, default=3, help="a chain steps/1/steps+1")
    parser.add_argument("--generate-prompts", type=int, default=4, help="prompts batch-1 generate decodes")
    parser.add_argument("--probe-runs", type=int, default=2, help="probe processes; the fastest is compared")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=None, help="also write the result here as JSON")
    parser.add_argument("--no-phases", dest="phases", action="store_false",
                        help="skip timing the probe pass's parts in this process")
    args = parser.parse_args()
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    dtype = getattr(torch, args.dtype)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="draftlab-probe-floor-"))
    target, drafter = write_random_pair(args.pair, work / "models", args.device)
    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(0, DRAFT_VOCAB[args.pair], (args.prompts, args.prompt_len), generator=gen).tolist()
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rows))
    few = work / "few.jsonl"
    few.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rows[:args.generate_prompts]))

    flags = ["--steps", str(args.steps), "--topk", "1", "--num-draft-tokens", str(args.steps + 1),
             "--max-new-tokens", str(args.new), "--device", args.device, "--dtype", args.dtype]
    pair = ["--target", str(target), "--drafter", str(drafter)]
    runs = [cli(["probe", *pair, "--prompts", str(prompts), *flags]) for _ in range(args.probe_runs)]
    probed = min(runs, key=lambda r: r["timings"]["continuations_s"] + r["timings"]["probe_s"])
    generated = cli(["generate", *pair, "--prompts", str(few), *flags, "--ignore-eos"])

    bandwidth, peak = copy_bandwidth(args.device, gib=4.0 if args.device.startswith("cuda") else 0.25), \
        matmul_peak(args.device, dtype)
    timings = probed["timings"]
    batch = probed.get("batch_size") or probed["config"].get("batch_size") or args.prompts
    draft_params = sum(n for name, n in parameters(drafter).items()
                       if name not in ("d2t", "t2d") and "embed_tokens" not in name)
    floor = floors(SHAPES[args.pair], draft_params, parameters(target), args, batch, bandwidth, peak)
    tokens = args.prompts * args.new
    generate_s = tokens / generated["tokens_per_second"]
    probe_s = timings["continuations_s"] + timings["probe_s"]
    result = {
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "date": time.strftime("%Y-%m-%d"), "pair": args.pair, "dtype": args.dtype, "prompts": args.prompts,
        "prompt_len": args.prompt_len, "new": args.new, "config": f"{args.steps}/1/{args.steps + 1}",
        "batch_size": batch, "copy_bandwidth_gb_s": bandwidth / 1e9, "matmul_peak_tflops": peak / 1e12,
        "continuations_s": timings["continuations_s"], "probe_s": timings["probe_s"], "probe_total_s": probe_s,
        "probe_timings": timings, "every_probe_run": [r["timings"] for r in runs],
        **floor, "floor_s": floor["continuations_floor_s"] + floor["probe_floor_s"],
        "generate_tokens_per_second": generated["tokens_per_second"], "generate_equivalent_s": generate_s,
        "mean_accept_length_probe": probed["mean_accept_length"],
        "mean_accept_length_generate": generated["mean_accept_length"]}
    result["ratio"] = probe_s / result["floor_s"]
    result["speedup_over_generate"] = generate_s / probe_s
    print(json.dumps(result), flush=True)
    every = ", ".join(f"{r['timings']['continuations_s'] + r['timings']['probe_s']:.2f}" for r in runs)
    capture = ", ".join(f"{r['timings'].get('graphs_captured', 0)} graphs in {r['timings'].get('graph_capture_s', 0):.2f} s "
                        f"(warm-up {r['timings'].get('graph_warmup_s', 0):.2f} s)" for r in runs)
    print(f"\nprobe runs, continuations + probe: {every} s (the fastest below); their captures: {capture}\n"
          f"\n| part | measured s | floor s | ratio |\n|---|---|---|---|\n"
          f"| continuations ({args.prompts} x {args.new} new, batch {batch}) | {timings['continuations_s']:.2f} | "
          f"{floor['continuations_floor_s']:.2f} | {timings['continuations_s'] / floor['continuations_floor_s']:.2f}x |\n"
          f"| probe ({result['config']}) | {timings['probe_s']:.2f} | {floor['probe_floor_s']:.2f} | "
          f"{timings['probe_s'] / floor['probe_floor_s']:.2f}x |\n"
          f"| total, load excluded | {probe_s:.2f} | {result['floor_s']:.2f} | {result['ratio']:.2f}x |\n\n"
          f"batch-1 generate, same flags: {generated['tokens_per_second']:.1f} tok/s, {generate_s:.1f} s for the "
          f"same tokens: the probe is {result['speedup_over_generate']:.1f}x faster")
    if args.phases:
        result["phases"] = phases(target, drafter, args, batch)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


def phases(target: Path, drafter: Path, args: argparse.Namespace, batch: int) -> dict:
    """The probe's own pass split into its parts, in this process on one batch of random sequences as
    long as the probe's (prompt + continuation): the target's cache-free pass, its argmax over every
    position, and the drafts of the config; each timed after a warm-up, then the CUDA kernels of the
    drafts under torch.profiler. What the CLI's ``probe_s`` does not show."""
    from draftlab.engines.sglang_flags import SpecFlags
    from draftlab.models.pair import load_pair
    from draftlab.probe.drafts import accepted_drafts
    from draftlab.probe.probe import _argmax

    pair = load_pair(target, drafter, dtype=args.dtype, device=args.device)
    device = pair.target.device
    flags = SpecFlags(args.steps, 1, args.steps + 1, "explicit")
    width = args.prompt_len + args.new
    tokens = torch.randint(0, DRAFT_VOCAB[args.pair], (batch, width), generator=torch.Generator().manual_seed(1))
    truth = torch.cat([tokens, torch.full((batch, args.steps + 1), -1)], dim=1)
    parts: dict[str, float] = {}

    def timed(name: str, fn):
        for _ in range(2):
            synchronize(device)
            start = time.perf_counter()
            out = fn()
            synchronize(device)
            parts[name] = round(time.perf_counter() - start, 4)
        return out

    with torch.inference_mode():
        step = timed("target pass", lambda: pair.target.forward_batch(tokens))
        timed("target argmax", lambda: _argmax(pair.target.lm_head, step.hidden))
        timed("drafts", lambda: accepted_drafts(pair.drafter, tokens, step.aux, truth, flags))
        print(json.dumps({"phases_s": parts, "batch": batch, "width": width}), flush=True)
        if device.type == "cuda":
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                accepted_drafts(pair.drafter, tokens, step.aux, truth, flags)
                synchronize(device)
            print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=15,
                                            max_name_column_width=60), flush=True)
    return parts


if __name__ == "__main__":
    main()
