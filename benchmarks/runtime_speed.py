"""Speed of the reference runtime: target decode, target verify, drafter step, and cost vs position.

GPU (the lead runs this on an H200):
    python benchmarks/runtime_speed.py --device cuda --model llama-3.1-8b
builds a Llama-3.1-8B-shaped target with random bf16 weights from its config (no download) and a
matching EAGLE-3 drafter (hidden 4096, draft vocab 32000), then times, at a 512-token context:
one-token decode, verify passes of 1/4/8/16/64 tokens, one drafter step (own hidden fed back) and
a drafter extend over 4 target features. Each pass is undone with crop() so the context stays fixed.

CPU (any machine):
    python benchmarks/runtime_speed.py --device cpu --model tiny
also times a decode step at positions 64, 256 and 1024 to show that the cost per generated token
does not grow with the position (KV caches, no recomputation of the prefix).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import transformers as tf

from draftlab.checkpoint import DrafterConfig
from draftlab.models import Eagle3Drafter, TargetRunner

SHAPES = {
    "llama-3.1-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                         rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                            "original_max_position_embeddings": 8192}),
    "tiny": dict(vocab_size=260, hidden_size=64, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=4096, rope_theta=10000.0),
}


def build(shape: str, device: str, dtype: torch.dtype) -> tuple[TargetRunner, Eagle3Drafter]:
    cfg = SHAPES[shape]
    with torch.device(device):
        model = tf.LlamaForCausalLM._from_config(tf.LlamaConfig(**cfg), dtype=dtype)
    target = TargetRunner(model.eval())
    drafter_cfg = DrafterConfig.from_dict({
        "architectures": ["LlamaForCausalLMEagle3"], **cfg, "num_hidden_layers": 1, "rms_norm_eps": 1e-5,
        "head_dim": cfg["hidden_size"] // cfg["num_attention_heads"], "hidden_act": "silu",
        "draft_vocab_size": min(32000, cfg["vocab_size"] // 2)})
    with torch.device(device):
        drafter = Eagle3Drafter(drafter_cfg, embed_tokens=target.embed_tokens)
    drafter.place(dtype, torch.device(device), keep_embedding=True).eval()
    return target, drafter


def timed(fn, device: str, repeats: int) -> float:
    """Median milliseconds of ``fn`` after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


@torch.no_grad()
def at_context(target: TargetRunner, drafter: Eagle3Drafter, context: int, device: str, repeats: int,
               verify_sizes: list[int]) -> dict[str, float]:
    """Per-pass times with ``context`` tokens cached in both runtimes."""
    vocab = target.config.vocab_size
    ids = torch.randint(0, vocab, (context,), device=device)
    target.reset()
    drafter.reset()
    step = target.forward(ids)
    drafter.forward(ids, step.aux)
    feats = step.aux[-4:]
    own = drafter.forward(ids[-1:], feats[-1:]).hidden
    drafter.crop(context)

    def undo_target(n: int):
        def run() -> None:
            target.forward(torch.randint(0, vocab, (n,), device=device))
            target.crop(context)
        return run

    def draft_step() -> None:
        drafter.forward(ids[-1:], own)
        drafter.crop(context)

    def draft_extend() -> None:
        drafter.forward(ids[-4:], feats)
        drafter.crop(context)

    out = {"decode_ms": timed(undo_target(1), device, repeats)}
    out.update({f"verify_{n}_ms": timed(undo_target(n), device, repeats) for n in verify_sizes})
    out["drafter_step_ms"] = timed(draft_step, device, repeats)
    out["drafter_extend_4_ms"] = timed(draft_extend, device, repeats)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--positions", default="64,256,1024", help="positions for the cost-vs-position check")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if args.device.startswith("cuda")
                                                            else torch.float32)
    if args.device == "cpu":
        torch.set_num_threads(1)  # tiny ops; threads only add noise on a shared machine
    torch.manual_seed(0)
    target, drafter = build(args.model, args.device, dtype)
    result = {
        "model": args.model, "device": args.device, "dtype": str(dtype).removeprefix("torch."),
        "hardware": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu",
        "torch": torch.__version__, "transformers": tf.__version__,
        "at_context": {"context": args.context, **at_context(target, drafter, args.context, args.device,
                                                                args.repeats, [1, 4, 8, 16, 64])},
        "by_position": {p: at_context(target, drafter, p, args.device, args.repeats, [])
                        for p in map(int, args.positions.split(","))},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
