"""``draftlab assess`` with every default on the toy pair (the drafter for version 1 on a perturbed version
2, version 1 as OLD, the demo's three prompts): wall time, each phase, the threads the default chose and the
verdict, with the machine's load before and after. The command is run as a user runs it (a fresh process,
no DRAFTLAB_THREADS, stdout to a file: its progress lines go to stderr all the same).

    python benchmarks/assess_defaults.py
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from draftlab.demo import DEMO_PROMPTS, perturbed_copy
from draftlab.toy import cached_toy_pair


def main() -> None:
    pair = cached_toy_pair()
    work = Path(tempfile.mkdtemp(prefix="assess-defaults-"))
    v2 = perturbed_copy(pair.target_dir, work / "toy-target-v2", scale=0.5)
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in DEMO_PROMPTS))
    argv = [sys.executable, "-m", "draftlab", "assess", "--drafter", str(pair.drafter_dir), "--target", str(v2),
            "--old-target", str(pair.target_dir), "--prompts", str(prompts), "--out", str(work / "out"), "--json"]
    env = {k: v for k, v in os.environ.items() if k not in ("DRAFTLAB_THREADS", "OMP_NUM_THREADS")}
    before = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - start
    doc = json.loads(done.stdout)
    print(f"{platform.node()}: {os.cpu_count()} CPUs, load average {before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"  wall {wall:.1f} s; phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in doc["timings"].items()))
    print(f"  threads: {doc['provenance']['threads']} ({doc['provenance']['threads_from']})")
    print(f"  verdict: {doc['verdict']['kind']}: {doc['verdict']['headline']}")
    print(f"  timing contradictions: {len(doc['timing']['contradictions'])}; cross-check: "
          + "; ".join(f"predicted {c['predicted']:.0f}, measured {c['measured']:.0f} tok/s, agrees {c['agrees']}"
                      for c in doc["measured_checks"]))
    print(f"  stderr progress lines: {sum(line.startswith(('assess:', 'profiling:')) for line in done.stderr.splitlines())}")


if __name__ == "__main__":
    main()
