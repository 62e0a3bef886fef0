"""``draftlab probe`` end to end against ``draftlab generate``, and plain decoding against HF's best.

    PYTHONPATH=src python benchmarks/probe_vs_generate.py [--prompts 64] [--new-tokens 256] [--out r.json]
CPU check of the script itself (tiny random pair, seconds):
    PYTHONPATH=src python benchmarks/probe_vs_generate.py --device cpu --shape tiny --prompts 4 --new-tokens 16

The 8B-shaped pair of benchmarks/gpu_smoke.py (random bf16 weights arranged for real acceptance) is
written to disk once, then every run is the CLI as a user types it, in its own process:

(a) per config (3/1/4, 5/4/8): ``probe --responses generate`` (its default: the target's own greedy
    continuations, decoded batched), timed by its own ``timings`` (model load excluded), against
    ``generate`` on the same prompts at batch size 1 and at the largest batch that fits (its JSON's
    decoding wall time: generated tokens over ``tokens_per_second``). Per-prompt accept lengths are
    compared with batch-1 generate's.
(b) plain decoding at batch 1, one 128-token prompt, 256 new tokens, in one process: draftlab's
    ``SpeculativeDecoder`` without a drafter (what ``generate --no-draft`` runs: static cache and CUDA
    graphs) against HF ``generate()`` with ``cache_implementation="static"`` (which transformers
    compiles when it can; its first call's time is reported as its warm-up), median of 3 after a
    warm-up, with the HBM floor (weight bytes over the measured copy bandwidth).
Prints JSON lines, then a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_smoke import DRAFT_VOCAB, ENV, write_random_pair  # noqa: E402

CONFIGS = [(3, 1, 4), (5, 4, 8)]


def cli(argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "draftlab", *argv, "--json"], capture_output=True, text=True,
                         env=ENV, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"draftlab {' '.join(argv)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def decode_seconds(doc: dict) -> float:
    tokens = sum(len(r["output_ids"]) for r in doc["results"])
    return tokens / doc["tokens_per_second"]


def versus_generate(target: Path, drafter: Path, prompts: Path, cfg: tuple[int, int, int], args) -> dict:
    flags = ["--steps", str(cfg[0]), "--topk", str(cfg[1]), "--num-draft-tokens", str(cfg[2])]
    common = ["--target", str(target), "--drafter", str(drafter), "--prompts", str(prompts), "--device", args.device,
              "--max-new-tokens", str(args.new_tokens), *flags]
    probe = cli(["probe", *common])
    generated = {b: cli(["generate", *common, "--ignore-eos", "--batch-size", str(b)]) for b in args.batch_sizes}
    seconds = {b: decode_seconds(doc) for b, doc in generated.items()}
    best = min(seconds, key=seconds.get)
    probe_s = probe["timings"]["total_s"] - probe["timings"]["load_s"]
    ref = [r["accept_lengths"] for r in generated[1]["results"]] if 1 in generated else None
    same = None if ref is None else sum(r["accept_lengths"] == g for r, g in zip(probe["results"], ref))
    return {"part": "a", "config": "/".join(map(str, cfg)), "prompts": len(probe["results"]),
            "new_tokens": args.new_tokens, "probe_s": round(probe_s, 2), "probe_timings": probe["timings"],
            "probe_batch_size": probe["config"]["batch_size"],
            "generate_s": {str(b): round(s, 2) for b, s in seconds.items()}, "generate_best_batch": best,
            "speedup_vs_best": round(seconds[best] / probe_s, 1),
            "speedup_vs_batch_1": round(seconds[1] / probe_s, 1) if 1 in seconds else None,
            "mean_accept_length": {"probe": probe["mean_accept_length"],
                                   **{f"generate_b{b}": d["mean_accept_length"] for b, d in generated.items()}},
            "prompts_with_equal_accept_lengths": same}


def plain_decoding(target: Path, args) -> dict:
    """draftlab's plain decoding vs HF generate with a static cache, side by side in this process."""
    import transformers as tf

    from draftlab.decode.decoder import SpeculativeDecoder, max_cache_len
    from draftlab.models.target import TargetRunner

    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    prompt = torch.randint(0, DRAFT_VOCAB[args.shape], (1, 128), generator=torch.Generator().manual_seed(1)).tolist()[0]
    n = args.new_tokens

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def timed(fn) -> float:
        sync()
        start = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - start

    runner = TargetRunner.load(target, dtype=str(dtype).removeprefix("torch."), device=args.device,
                               max_len=max_cache_len(len(prompt), n, None))
    decoder = SpeculativeDecoder(runner, None, None)

    def ours() -> list[int]:
        return [t for c in decoder.stream(prompt, max_new_tokens=n, ignore_eos=True) for t in c.tokens]

    ours_warmup = timed(ours)
    ours_s = statistics.median(timed(ours) for _ in range(3))
    tokens_ours = ours()
    weights = sum(p.numel() * p.element_size() for p in runner.model.parameters())
    decoder = runner = None  # free the target before HF loads its copy (a del would leave ours() a dangling name)
    model = tf.AutoModelForCausalLM.from_pretrained(target, dtype=dtype, local_files_only=True).to(device).eval()
    ids = torch.tensor([prompt], device=device)

    def hf() -> torch.Tensor:
        with torch.inference_mode():
            return model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                  cache_implementation="static", pad_token_id=0)

    hf_warmup = timed(hf)
    hf(), hf()
    hf_s = statistics.median(timed(hf) for _ in range(3))
    tokens_hf = hf()[0, len(prompt):].tolist()
    floor_ms = None
    if device.type == "cuda":
        src = torch.empty(2 * 2**30, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        copy_s = statistics.median(timed(lambda: dst.copy_(src)) for _ in range(5))
        bandwidth = 2 * src.numel() / copy_s  # bytes read + written
        floor_ms = round(weights / bandwidth * 1e3, 2)
    return {"part": "b", "new_tokens": n, "prompt_tokens": len(prompt),
            "draftlab_ms_per_token": round(ours_s / n * 1e3, 2), "hf_static_ms_per_token": round(hf_s / n * 1e3, 2),
            "draftlab_over_hf": round(ours_s / hf_s, 3), "draftlab_first_call_s": round(ours_warmup, 1),
            "hf_first_call_s": round(hf_warmup, 1), "hbm_floor_ms": floor_ms,
            "same_tokens": sum(a == b for a, b in zip(tokens_ours, tokens_hf))}


def table(rows: list[dict]) -> str:
    lines = ["| part | what | result |", "|---|---|---|"]
    for r in rows:
        if r["part"] == "a":
            gens = ", ".join(f"batch {b}: {s} s" for b, s in r["generate_s"].items())
            lines.append(f"| a | {r['config']}, {r['prompts']} x {r['new_tokens']} | probe {r['probe_s']} s "
                         f"(batch {r['probe_batch_size']}; {r['probe_timings']}); generate {gens}; "
                         f"{r['speedup_vs_best']}x vs generate's best (batch {r['generate_best_batch']}), "
                         f"{r['speedup_vs_batch_1']}x vs batch 1; equal accept lengths "
                         f"{r['prompts_with_equal_accept_lengths']}/{r['prompts']}; mean {r['mean_accept_length']} |")
        else:
            lines.append(f"| b | plain decoding, batch 1, {r['prompt_tokens']} + {r['new_tokens']} tokens | draftlab "
                         f"{r['draftlab_ms_per_token']} ms/token, HF static {r['hf_static_ms_per_token']} ms/token "
                         f"({r['draftlab_over_hf']}x); floor {r['hbm_floor_ms']} ms; first calls {r['draftlab_first_call_s']}"
                         f" s / {r['hf_first_call_s']} s; same tokens {r['same_tokens']}/{r['new_tokens']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--shape", default="llama-3.1-8b", choices=sorted(DRAFT_VOCAB))
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--batch-sizes", type=lambda v: [int(x) for x in v.split(",")], default=[1, 64])
    parser.add_argument("--parts", default="a,b")
    parser.add_argument("--workdir")
    parser.add_argument("--out")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="draftlab-pvg-"))
    target, drafter = write_random_pair(args.shape, work / "models", args.device)
    prompts = work / "prompts.jsonl"
    rows = torch.randint(0, DRAFT_VOCAB[args.shape], (args.prompts, args.prompt_len),
                         generator=torch.Generator().manual_seed(0)).tolist()
    prompts.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rows))
    results = []
    if "a" in args.parts:
        for cfg in CONFIGS:
            results.append(versus_generate(target, drafter, prompts, cfg, args))
            print(json.dumps(results[-1]), flush=True)
    if "b" in args.parts:
        results.append(plain_decoding(target, args))
        print(json.dumps(results[-1]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()
