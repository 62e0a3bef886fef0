"""Speed of the offline probe against real speculative decoding and against its floor.

GPU (the lead runs this on an H200):
    python benchmarks/probe_speed.py --device cuda --model llama-3.1-8b
CPU smoke run (any machine, seconds):
    python benchmarks/probe_speed.py --device cpu --model tiny --small

Models: a Llama-3.1-8B-shaped target with random bf16 weights built from its config (no download)
and a matching EAGLE-3 drafter (see runtime_speed.py). Random weights accept almost nothing, which
is fine for timing: the probe's cost does not depend on acceptance, and generate's is then its
slowest (one verify per token) -- so part (a) is also reported per cycle.

(a) vs generate, per config (chain 3/1/4, tree 5/4/8): 8 prompts x 256 new tokens. generate runs
    the reference decoder; the probe then walks the same continuations. Reported: wall times,
    tokens evaluated per second, speedup, and whether the per-prompt accept lengths match.
(b) vs the floor: 64 prompts x 1,024 continuation tokens. The floor is, over the same batches, one
    target pass over all tokens plus the drafter passes the probe cannot avoid (step 1 over B x n
    tokens, each later step over B x topk x n tokens). Reported: probe / floor.
(c) peak GPU memory of the probe vs sequence length at a fixed batch size.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch
from runtime_speed import build

from draftlab.decode.decoder import SpeculativeDecoder, max_cache_len
from draftlab.engines.sglang_flags import resolve_spec_flags
from draftlab.models.devices import synchronize
from draftlab.models.target import TargetRunner
from draftlab.probe.probe import probe_sequences

CONFIGS = [(3, 1, 4), (5, 4, 8)]


def clock(fn, device: str) -> tuple[float, object]:
    synchronize(torch.device(device))
    start = time.perf_counter()
    out = fn()
    synchronize(torch.device(device))
    return time.perf_counter() - start, out


def random_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n, length), generator=gen).tolist()


def versus_generate(target, drafter, cfg, args) -> dict:
    flags = resolve_spec_flags(*cfg)
    prompts = random_prompts(args.gen_prompts, args.prompt_len, target.config.vocab_size, 0)
    decoder = SpeculativeDecoder(target, drafter, flags)

    def run_generate():
        outputs, lengths = [], []
        for prompt in prompts:
            commits = list(decoder.stream(prompt, max_new_tokens=args.gen_tokens, ignore_eos=True))
            outputs.append([t for c in commits for t in c.tokens])
            lengths.append([c.accept_length for c in commits if c.accept_length is not None])
        return outputs, lengths

    list(decoder.stream(prompts[0][:8], max_new_tokens=8, ignore_eos=True))  # warm-up
    gen_s, (outputs, gen_lengths) = clock(run_generate, args.device)
    # the probe's last cycle needs look-ahead past max_new_tokens, which generate did not produce: pad
    # with a placeholder and compare every cycle but the last
    extra = [o + [0] * (cfg[0] + 1) for o in outputs]
    probe_sequences(target, drafter, prompts[:1], extra[:1], flags, max_new_tokens=8, batch_size=1)  # warm-up
    probe_s, result = clock(lambda: probe_sequences(target, drafter, prompts, extra, flags,
                                                    max_new_tokens=args.gen_tokens, batch_size=args.batch_size),
                            args.device)
    tokens = sum(len(o) for o in outputs)
    same = sum(r.accept_lengths[:-1] == g[:-1] for r, g in zip(result.results, gen_lengths))
    return {"part": "a", "config": "/".join(map(str, cfg)), "prompts": len(prompts), "new_tokens": args.gen_tokens,
            "generate_s": round(gen_s, 3), "probe_s": round(probe_s, 4),
            "generate_tok_per_s": round(tokens / gen_s, 1), "probe_tok_per_s": round(tokens / probe_s, 1),
            "speedup": round(gen_s / probe_s, 1), "cycles": sum(len(g) for g in gen_lengths),
            "prompts_with_matching_accept_lengths": same, "mean_accept_length": round(result.mean_accept_length, 3)}


def versus_floor(target, drafter, cfg, args) -> dict:
    flags = resolve_spec_flags(*cfg)
    vocab = target.config.vocab_size
    prompts = random_prompts(args.floor_prompts, args.prompt_len, vocab, 1)
    conts = random_prompts(args.floor_prompts, args.floor_tokens, vocab, 2)
    b, n, k = args.batch_size, args.prompt_len + args.floor_tokens, cfg[1]
    probe_sequences(target, drafter, prompts[:b], conts[:b], flags, max_new_tokens=16, batch_size=b)  # warm-up
    probe_s, _ = clock(lambda: probe_sequences(target, drafter, prompts, conts, flags,
                                               max_new_tokens=args.floor_tokens, batch_size=b), args.device)
    device = torch.device(args.device)
    causal = torch.ones(n - 1, n - 1, dtype=torch.bool, device=device).tril()[None]

    @torch.no_grad()
    def floor():
        for start in range(0, len(prompts), b):
            rows = [p + c for p, c in zip(prompts[start:start + b], conts[start:start + b])]
            ids = torch.tensor(rows, device=device)
            step = target.forward_batch(ids)
            pos = torch.arange(n - 1, device=device)
            _, hidden, _ = drafter.forward_masked(ids[:, 1:], step.aux[:, :-1], pos.expand(len(rows), -1), causal)
            wide = hidden.repeat_interleave(k, 0)
            for _ in range(cfg[0] - 1):
                drafter.forward_masked(ids[:, 1:].repeat_interleave(k, 0), wide, pos.expand(len(rows) * k, -1), causal)

    floor()
    floor_s, _ = clock(floor, args.device)
    tokens = len(prompts) * n
    return {"part": "b", "config": "/".join(map(str, cfg)), "prompts": len(prompts), "tokens_each": n,
            "batch_size": b, "probe_s": round(probe_s, 3), "floor_s": round(floor_s, 3),
            "probe_over_floor": round(probe_s / floor_s, 3), "probe_tok_per_s": round(tokens / probe_s, 1)}


def memory_by_length(target, drafter, cfg, args) -> list[dict]:
    flags = resolve_spec_flags(*cfg)
    out = []
    for length in args.lengths:
        prompts = random_prompts(args.batch_size, 16, target.config.vocab_size, 3)
        conts = random_prompts(args.batch_size, length - 16, target.config.vocab_size, 4)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        seconds, _ = clock(lambda: probe_sequences(target, drafter, prompts, conts, flags, max_new_tokens=length - 16,
                                                   batch_size=args.batch_size), args.device)
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if args.device.startswith("cuda") else None
        out.append({"part": "c", "config": "/".join(map(str, cfg)), "batch_size": args.batch_size,
                    "seq_len": length, "probe_s": round(seconds, 3),
                    "peak_extra_gib": None if peak is None else round(peak, 2)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="llama-3.1-8b", choices=["llama-3.1-8b", "tiny"])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--small", action="store_true", help="tiny sizes for a CPU smoke run")
    args = parser.parse_args()
    big = not args.small
    args.prompt_len = 128 if big else 16
    args.gen_prompts, args.gen_tokens = (8, 256) if big else (2, 24)
    args.floor_prompts, args.floor_tokens = (64, 1024) if big else (4, 48)
    args.lengths = [512, 1024, 2048, 4096] if big else [64, 128]
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[args.dtype]
    torch.manual_seed(0)
    model, drafter = build(args.model, args.device, dtype)
    # generate at its best settings: static KV caches (and CUDA graphs on a GPU) for target and drafter;
    # the probe runs on the same weights (its batched pass uses the model's own attention)
    max_len = max(max_cache_len(args.prompt_len, args.gen_tokens, resolve_spec_flags(*cfg)) for cfg in CONFIGS)
    target = TargetRunner(model, cache="static", max_len=max_len)
    drafter.use_static_cache(max_len)
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(json.dumps({"device": device_name, "model": args.model, "dtype": args.dtype, "torch": torch.__version__}))
    for cfg in CONFIGS:
        print(json.dumps(versus_generate(target, drafter, cfg, args)), flush=True)
        print(json.dumps(versus_floor(target, drafter, cfg, args)), flush=True)
        for row in memory_by_length(target, drafter, cfg, args):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
