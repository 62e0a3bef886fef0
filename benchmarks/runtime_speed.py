"""Speed of the runtime, eager and fast side by side: target decode, target verify, drafter step
and extend, cost vs position, and (where draftlab.decode is present) whole speculative cycles.

GPU (the lead runs this on an H200):
    python benchmarks/runtime_speed.py --device cuda --model llama-3.1-8b --out runtime_speed.json
builds a Llama-3.1-8B-shaped target with random bf16 weights from its config (no download) and a
matching EAGLE-3 drafter (hidden 4096, draft vocab 32000), then times, at a 512-token context, for
the eager path (HF DynamicCache, growing drafter cache) and then the fast path (static caches, CUDA
graphs per token-count bucket): one-token decode, verify passes of 1/4/8/16/64 tokens, one drafter
step (own hidden fed back) and a drafter extend over 4 target features. Each pass is undone with
crop() so the context stays fixed. It also checks fast against eager (bf16 logits, greedy tokens)
and runs the speculative decoder for tokens/s. Random weights: the drafter almost never agrees with
the target, so accept lengths are ~1 and tokens/s is about 1 / cycle time.

CPU (any machine):
    python benchmarks/runtime_speed.py --device cpu --model tiny
the fast path there is the static cache without graphs. Both paths also time a decode step at
positions 64, 256 and 1024: the cost per token does not grow with the position.
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
from draftlab.models.devices import synchronize

SHAPES = {
    "llama-3.1-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                         rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                            "original_max_position_embeddings": 8192}),
    "tiny": dict(vocab_size=260, hidden_size=64, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=4096, rope_theta=10000.0),
}


def build(shape: str, device: str, dtype: torch.dtype) -> tuple[tf.PreTrainedModel, Eagle3Drafter]:
    """The target model (random weights) and a matching random drafter sharing its embedding."""
    cfg = SHAPES[shape]
    with torch.device(device):
        model = tf.LlamaForCausalLM._from_config(tf.LlamaConfig(**cfg), dtype=dtype)
    drafter_cfg = DrafterConfig.from_dict({
        "architectures": ["LlamaForCausalLMEagle3"], **cfg, "num_hidden_layers": 1, "rms_norm_eps": 1e-5,
        "head_dim": cfg["hidden_size"] // cfg["num_attention_heads"], "hidden_act": "silu",
        "draft_vocab_size": min(32000, cfg["vocab_size"] // 2)})
    with torch.device(device):
        drafter = Eagle3Drafter(drafter_cfg, embed_tokens=model.get_input_embeddings())
    drafter.place(dtype, torch.device(device), keep_embedding=True).eval()
    return model.eval(), drafter


def timed(fn, device: str, repeats: int) -> float:
    """Median milliseconds of ``fn`` after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(torch.device(device))
        start = time.perf_counter()
        fn()
        synchronize(torch.device(device))
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


@torch.no_grad()
def reference_run(target: TargetRunner, drafter: Eagle3Drafter, prompt: torch.Tensor, new: int) -> dict:
    """What the path computes for a prompt: prefill logits, greedy tokens and their logits, an
    8-token verify's logits and aux, the drafter's extend logits. Compared between paths."""
    target.reset()
    drafter.reset()
    pre = target.forward(prompt)
    tokens, logits = [int(pre.logits[-1].argmax())], [pre.logits[-1]]
    for _ in range(new - 1):
        step = target.forward(torch.tensor(tokens[-1:], device=prompt.device))
        tokens.append(int(step.logits[-1].argmax()))
        logits.append(step.logits[-1])
    target.crop(prompt.numel())
    verify = target.forward(torch.tensor(tokens[:8], device=prompt.device))
    draft = drafter.forward(prompt, pre.aux)
    return {"tokens": tokens, "logits": torch.stack(logits), "verify_logits": verify.logits, "verify_aux": verify.aux,
            "draft_logits": draft.logits}


@torch.no_grad()
def teacher_forced(target: TargetRunner, prompt: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    """Logits of each step when the given tokens are fed one by one (same inputs as the reference)."""
    target.reset()
    out = [target.forward(prompt).logits[-1]]
    for t in tokens[:-1]:
        out.append(target.forward(torch.tensor([t], device=prompt.device)).logits[-1])
    return torch.stack(out)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def compare(fast: dict, eager: dict, forced: torch.Tensor) -> dict:
    agree = next((i for i, (x, y) in enumerate(zip(fast["tokens"], eager["tokens"])) if x != y), len(eager["tokens"]))
    return {"greedy_tokens": len(eager["tokens"]), "greedy_equal_prefix": agree,
            "rel_err_step_logits_teacher_forced": rel(forced, eager["logits"]),
            "rel_err_verify8_logits": rel(fast["verify_logits"], eager["verify_logits"]),
            "rel_err_verify8_aux": rel(fast["verify_aux"], eager["verify_aux"]),
            "rel_err_drafter_extend_logits": rel(fast["draft_logits"], eager["draft_logits"]),
            "argmax_equal_teacher_forced": float((forced.argmax(-1) == eager["logits"].argmax(-1)).float().mean())}


def spec_runs(target: TargetRunner, drafter: Eagle3Drafter, prompt: torch.Tensor, new: int, device: str) -> dict:
    """Tokens/s of plain decoding and of speculative chains/trees through draftlab.decode (if present)."""
    try:
        from draftlab.decode.decoder import SpeculativeDecoder
        from draftlab.engines.sglang_flags import SpecFlags
    except ImportError:
        return {}
    configs = {"baseline": None, "chain_3_1_4": (3, 1, 4), "tree_5_4_8": (5, 4, 8)}
    out = {}
    for name, flags in configs.items():
        decoder = SpeculativeDecoder(target, drafter if flags else None,
                                     SpecFlags(*flags, source="explicit") if flags else None)
        run = lambda n: list(decoder.stream(prompt.tolist(), max_new_tokens=n, ignore_eos=True))  # noqa: E731
        run(16)  # warm-up (captures the graphs this config needs)
        synchronize(torch.device(device))
        start = time.perf_counter()
        commits = run(new)
        synchronize(torch.device(device))
        seconds = time.perf_counter() - start
        cycles = [c.accept_length for c in commits if c.accept_length is not None]
        produced = sum(len(c.tokens) for c in commits)
        out[name] = {"tokens_per_second": produced / seconds, "cycles": len(cycles),
                     "ms_per_cycle_incl_prefill": 1000 * seconds / max(len(cycles), 1),
                     "mean_accept_length": sum(cycles) / max(len(cycles), 1)}
    return out


def run_path(target: TargetRunner, drafter: Eagle3Drafter, args: argparse.Namespace) -> dict:
    out = {"at_context": {"context": args.context, **at_context(target, drafter, args.context, args.device,
                                                                  args.repeats, args.verify_sizes)},
           "by_position": {p: at_context(target, drafter, p, args.device, args.repeats, [])["decode_ms"]
                           for p in map(int, args.positions.split(","))}}
    if args.spec_tokens:
        prompt = torch.randint(0, target.config.vocab_size, (args.context,), device=args.device)
        out["spec"] = spec_runs(target, drafter, prompt, args.spec_tokens, args.device)
    return out


def table(result: dict) -> str:
    """The eager and fast columns side by side."""
    eager, fast = result["eager"], result.get("fast", {})
    rows = [(k, eager["at_context"][k], fast.get("at_context", {}).get(k)) for k in eager["at_context"]
            if k != "context"]
    rows += [(f"decode_ms@{p}", v, fast.get("by_position", {}).get(p)) for p, v in eager["by_position"].items()]
    for name, spec in eager.get("spec", {}).items():
        f = fast.get("spec", {}).get(name, {})
        rows += [(f"{name} tok/s", spec["tokens_per_second"], f.get("tokens_per_second")),
                 (f"{name} ms/cycle", spec["ms_per_cycle_incl_prefill"], f.get("ms_per_cycle_incl_prefill"))]
    lines = [f"{'pass':28} {'eager':>10} {'fast':>10} {'speed-up':>9}"]
    for name, e, f in rows:
        ratio = f"{e / f:8.1f}x" if f else ""
        lines.append(f"{name:28} {e:10.2f} {f if f is not None else float('nan'):10.2f} {ratio:>9}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--positions", default="64,256,1024", help="positions for the cost-vs-position check")
    parser.add_argument("--paths", default="eager,fast", help="eager, fast or both")
    parser.add_argument("--compile", action="store_true", help="the fast step's layer parts through torch.compile")
    parser.add_argument("--check-tokens", type=int, default=32, help="greedy tokens compared fast vs eager")
    parser.add_argument("--spec-tokens", type=int, default=128, help="tokens per speculative run (0: skip)")
    parser.add_argument("--verify-sizes", type=lambda v: [int(x) for x in v.split(",")], default=[1, 4, 8, 16, 64])
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if args.device.startswith("cuda")
                                                            else torch.float32)
    if args.device == "cpu":
        torch.set_num_threads(1)  # tiny ops; threads only add noise on a shared machine
    torch.manual_seed(0)
    model, drafter = build(args.model, args.device, dtype)
    paths = args.paths.split(",")
    prompt = torch.randint(0, model.config.vocab_size, (args.context,), device=args.device)
    result = {
        "model": args.model, "device": args.device, "dtype": str(dtype).removeprefix("torch."),
        "hardware": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu",
        "torch": torch.__version__, "transformers": tf.__version__, "compile": args.compile,
    }
    # eager first: building the fast runner switches the model's attention function to the static one
    reference = None
    if "eager" in paths:
        target = TargetRunner(model, cache="dynamic")
        result["eager"] = run_path(target, drafter, args)
        reference = reference_run(target, drafter, prompt, args.check_tokens)
    if "fast" in paths:
        max_len = max(args.context, *map(int, args.positions.split(","))) + 128
        start = time.perf_counter()
        target = TargetRunner(model, cache="static", max_len=max_len, compile=args.compile)
        drafter.use_static_cache(max_len)
        fast_ref = reference_run(target, drafter, prompt, args.check_tokens)  # also captures the common buckets
        synchronize(torch.device(args.device))
        result["fast_first_run_s"] = time.perf_counter() - start
        if reference is not None:
            result["fast_vs_eager"] = compare(fast_ref, reference, teacher_forced(target, prompt, reference["tokens"]))
        result["fast"] = run_path(target, drafter, args)
    text = json.dumps(result, indent=2, default=float)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    print(text)
    if "eager" in result:
        print(table(result))
    else:
        print(json.dumps(result.get("fast", {}).get("at_context", {}), indent=1, default=float))


if __name__ == "__main__":
    main()
