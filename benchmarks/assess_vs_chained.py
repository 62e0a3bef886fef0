"""``assess`` against the single commands a user would otherwise chain, each as its own process.

    PYTHONPATH=src python benchmarks/assess_vs_chained.py [--device cpu] [--max-new-tokens 64]

On the toy pair (the drafter trained for v1, a perturbed v2 as the new target, v1 as OLD), with the
same grid, batch sizes and continuation length everywhere, the chain is: inspect, check, vocab count
and coverage of the prompts, plan --target (probe of the grid and profile), drift with the drafter
(the default config on both targets), and probe on OLD for each grid config (the ceiling). It still
does less than assess: no model-free baselines (no command has them) and no slices. Wall-clock seconds
of each command, as a user types it, including start-up and model loading.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = "1/1/2,3/1/4,5/1/6,3/4/8"


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "draftlab", *argv], check=False, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"draftlab {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-new-tokens", default="64")
    args = parser.parse_args()
    from draftlab.demo import DEMO_PROMPTS, perturbed_copy
    from draftlab.toy import cached_toy_pair

    pair = cached_toy_pair()
    work = Path(tempfile.mkdtemp(prefix="draftlab-assess-bench-"))
    v1, d = str(pair.target_dir), str(pair.drafter_dir)
    v2 = str(perturbed_copy(pair.target_dir, work / "v2", scale=0.5))
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in DEMO_PROMPTS))
    texts = work / "texts.jsonl"  # vocab count reads text rows
    texts.write_text("".join(json.dumps({"text": p}) + "\n" for p in DEMO_PROMPTS))
    p, n, dev = str(prompts), args.max_new_tokens, ["--device", args.device]
    chain = {
        "inspect": ["inspect", d],
        "check": ["check", d, "--target", v2],
        "vocab count": ["vocab", "count", "--data", str(texts), "--tokenizer", v2, "-o", str(work / "counts.json")],
        "vocab coverage": ["vocab", "coverage", d, "--counts", str(work / "counts.json")],
        "plan --target": ["plan", "--target", v2, "--drafter", d, "--prompts", p, "--grid", GRID, "--batch-sizes", "1,8",
                          "--max-new-tokens", n, *dev],
        "drift --drafter": ["drift", "--target-a", v1, "--target-b", v2, "--prompts", p, "--drafter", d,
                            "--max-new-tokens", n, *dev],
    }
    for c in GRID.split(","):
        s, k, t = c.split("/")
        chain[f"probe {c} on OLD"] = ["probe", "--target", v1, "--drafter", d, "--prompts", p, "--steps", s, "--topk", k,
                                      "--num-draft-tokens", t, "--max-new-tokens", n, *dev]
    times = {name: timed(argv) for name, argv in chain.items()}
    one = timed(["assess", "--drafter", d, "--target", v2, "--old-target", v1, "--prompts", p, "--grid", GRID,
                 "--batch-sizes", "1,8", "--max-new-tokens", n, *dev, "--out", str(work / "assess")])
    for name, seconds in times.items():
        print(f"{name:<22} {seconds:7.1f} s")
    total = sum(times.values())
    print(f"{'chained, total':<22} {total:7.1f} s")
    print(f"{'assess':<22} {one:7.1f} s   ({total / one:.2f}x faster than the chain)")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
