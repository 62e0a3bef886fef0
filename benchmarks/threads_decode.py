"""Decode speed of the toy pair by torch thread count, side by side in one run: torch's own default
(every logical CPU this process may use), draftlab's default (physical cores, draftlab.threads) and
one thread. Rounds are interleaved so machine load hits every setting alike; the median is reported.

    python benchmarks/threads_decode.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from draftlab.decode.generate import generate
from draftlab.demo import DEMO_PROMPTS
from draftlab.threads import default_threads
from draftlab.toy import cached_toy_pair


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pair = cached_toy_pair()
    prompts = Path(tempfile.mkdtemp()) / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in DEMO_PROMPTS))
    settings = {"torch default": torch.get_num_threads(), "draftlab default": default_threads()[0], "one thread": 1}
    rates: dict[str, dict[str, list[float]]] = {name: {"spec": [], "plain": []} for name in settings}
    for _ in range(args.rounds):
        for name, n in settings.items():
            torch.set_num_threads(n)
            spec = generate(pair.target_dir, pair.drafter_dir, prompts, steps=3, topk=1, num_draft_tokens=4,
                            max_new_tokens=48)
            plain = generate(pair.target_dir, None, prompts, no_draft=True, max_new_tokens=48)
            rates[name]["spec"].append(spec.tokens_per_second)
            rates[name]["plain"].append(plain.tokens_per_second)
    print(f"{time.strftime('%Y-%m-%d')} {platform.machine()} cpus in affinity {len(os.sched_getaffinity(0))}, "
          f"load average {os.getloadavg()[0]:.1f}, {args.rounds} rounds")
    print("| setting | threads | 3/1/4 tok/s (median, min-max) | plain tok/s (median, min-max) |")
    print("|---|---:|---:|---:|")
    for name, n in settings.items():
        s, p = rates[name]["spec"], rates[name]["plain"]
        print(f"| {name} | {n} | {statistics.median(s):.0f} ({min(s):.0f}-{max(s):.0f}) | "
              f"{statistics.median(p):.0f} ({min(p):.0f}-{max(p):.0f}) |")


if __name__ == "__main__":
    main()
