"""``draftlab generate`` on the toy pair while other processes keep every CPU busy: the default threads
(draftlab.threads: the physical cores less the busy ones) against ``--threads 1`` and against one thread per
CPU (the default before it read the load), side by side in one run.

The load is one spinning process per CPU this process may use, started first and left to raise the
1-minute load average (what the default reads) before the timed runs; the two settings then alternate
for ``--rounds`` rounds, each a fresh ``draftlab generate --json`` process, and the median tok/s of each
is reported with the threads the default chose and why (its provenance).

    python benchmarks/threads_under_load.py [--rounds 3] [--settle 60]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from draftlab.demo import DEMO_PROMPTS
from draftlab.toy import cached_toy_pair

SPIN = "while True: pass"


def generate(pair, prompts: Path, threads: list[str]) -> dict:
    """One ``draftlab generate --json`` run (no DRAFTLAB_THREADS: the default is draftlab's own)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DRAFTLAB_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-m", "draftlab", "generate", "--target", str(pair.target_dir), "--drafter",
                          str(pair.drafter_dir), "--prompts", str(prompts), "--steps", "3", "--topk", "1",
                          "--num-draft-tokens", "4", "--max-new-tokens", "48", "--json", *threads],
                         capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=60.0, help="seconds the load runs before the first timing")
    args = parser.parse_args()
    pair = cached_toy_pair()
    prompts = Path(tempfile.mkdtemp()) / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in DEMO_PROMPTS))
    cpus = len(os.sched_getaffinity(0))
    load = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(cpus)]
    try:
        time.sleep(args.settle)
        settings = {"default": [], "--threads 1": ["--threads", "1"], f"--threads {cpus}": ["--threads", str(cpus)]}
        rates: dict[str, list[float]] = {name: [] for name in settings}
        chosen = set()
        for _ in range(args.rounds):
            for name, extra in settings.items():
                doc = generate(pair, prompts, extra)
                rates[name].append(doc["tokens_per_second"])
                if name == "default":
                    chosen.add((doc["provenance"]["threads"], doc["provenance"]["threads_from"]))
        loadavg = os.getloadavg()[0]
    finally:
        for p in load:
            p.kill()
    print(f"{platform.node()}: {cpus} CPUs, {cpus} spinning processes, load average {loadavg:.1f} at the end; "
          f"{args.rounds} interleaved rounds")
    for name, values in rates.items():
        print(f"  {name:13s} median {statistics.median(values):7.1f} tok/s  (runs: "
              + ", ".join(f"{v:.1f}" for v in values) + ")")
    print("  default chose: " + "; ".join(f"{n} thread(s) from {why}" for n, why in sorted(chosen)))
    ratio = statistics.median(rates["--threads 1"]) / statistics.median(rates["default"])
    print(f"  --threads 1 / default: {ratio:.2f}x")


if __name__ == "__main__":
    main()
