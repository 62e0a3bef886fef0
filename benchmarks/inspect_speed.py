"""How long `inspect` and `check` take on multi-GB checkpoints (headers only), against reading the bytes.

Builds, in a temporary folder, a Llama-3.1-8B-shaped target (4 safetensors shards, ~16 GB) and a
Kimi-K2-shaped EAGLE-3 drafter (AQ-MedAI's config, ~2.4 GB) as sparse files: real headers, holes
for the data, so they cost no disk. Then times, in this process:
  - inspect_checkpoint on each (headers, config, and the drafter's d2t/t2d bytes),
  - check_pair on the pair,
  - reading every tensor byte of each once (what any tool that loads the weights must do; on sparse
    files this is a lower bound, since holes read at memory speed instead of disk speed),
and, cold (a new interpreter each run, start and imports included): `python -m draftlab inspect` of
the drafter and of the target, `python -m draftlab --help`, and for scale `import torch, transformers`,
which these commands no longer pay. ``--cold-only`` skips the in-process timings and the byte reads;
``--baseline-src DIR`` also runs the cold commands from another checkout's src, in turns with this one.

    python benchmarks/inspect_speed.py [--repeats 5] [--workdir DIR] [--cold-only] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from draftlab.checkpoint import open_checkpoint  # noqa: E402
from draftlab.checkpoint.synth import write_drafter, write_target  # noqa: E402
from draftlab.compat import check_pair  # noqa: E402
from draftlab.compat.summary import inspect_checkpoint  # noqa: E402

KIMI_DRAFTER = Path("/work/shared/reference/configs/aq-medai-kimi-k2-instruct-eagle3.config.json")

LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cold(argv: list[str], envs: list[dict[str, str]], repeats: int) -> list[tuple[float, float]]:
    """Per environment, median wall seconds and median CPU seconds (user + sys) of ``repeats`` new
    interpreters running ``argv``; the environments take turns, so load hits them alike.

    CPU time is what the command costs on an idle machine; wall time also holds the waits on a busy one.
    """
    walls: list[list[float]] = [[] for _ in envs]
    cpus: list[list[float]] = [[] for _ in envs]
    for _ in range(repeats):
        for i, env in enumerate(envs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([sys.executable, *argv], env=env, check=True, capture_output=True)
            walls[i].append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus[i].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus)]


def read_all_bytes(path: Path) -> int:
    total = 0
    for file in open_checkpoint(path).weight_files:
        with file.open("rb") as f:
            while chunk := f.read(64 * 1024 * 1024):
                total += len(chunk)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--cold-only", action="store_true", help="Only the cold commands (no byte reads).")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="Also run the cold commands from this src folder (e.g. an older commit's), in turns.")
    args = parser.parse_args()
    load = os.getloadavg()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="draftlab-bench-"))
    target = write_target(work / "llama-3.1-8b", LLAMA_31_8B, shards=4, sparse=True)
    drafter_config = json.loads(KIMI_DRAFTER.read_text())
    drafter = write_drafter(work / "kimi-k2-eagle3", drafter_config, sparse=True)
    sizes = {p.name: open_checkpoint(p).size_on_disk for p in (target, drafter)}

    results = {} if args.cold_only else {
        "inspect target (s)": timed(lambda: inspect_checkpoint(target), args.repeats),
        "inspect drafter (s)": timed(lambda: inspect_checkpoint(drafter, num_target_layers=61), args.repeats),
        "check drafter vs target (s)": timed(lambda: check_pair(drafter, target), args.repeats),
        "read all bytes, target (s)": timed(lambda: read_all_bytes(target), 1),
        "read all bytes, drafter (s)": timed(lambda: read_all_bytes(drafter), 1),
    }
    commands = {
        "`draftlab inspect DRAFTER --json`": ["-m", "draftlab", "inspect", str(drafter), "--json"],
        "`draftlab inspect TARGET --json`": ["-m", "draftlab", "inspect", str(target), "--json"],
        "`draftlab --help`": ["-m", "draftlab", "--help"],
        "`python -c 'import torch, transformers'`": ["-c", "import torch, transformers"],
    }
    srcs = [Path(__file__).resolve().parents[1] / "src"] + ([args.baseline_src] if args.baseline_src else [])
    envs = [{**os.environ, "PYTHONPATH": str(src)} for src in srcs]
    started = {name: cold(argv, envs, args.repeats) for name, argv in commands.items()}

    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}")
    for name, size in sizes.items():
        print(f"{name}: {size / 1e9:.2f} GB on disk (sparse)")
    print(f"load average before: {load[0]:.2f}, after: {os.getloadavg()[0]:.2f}")
    for key, value in results.items():
        print(f"{key:45s} {value:8.3f}")
    print(f"cold, a new interpreter each run, median of {args.repeats}: wall s / CPU s, " +
          " | ".join(str(src) for src in srcs))
    for name, timings in started.items():
        print(f"  {name:45s} " + " | ".join(f"{wall:6.3f} / {cpu:6.3f}" for wall, cpu in timings))
    if not args.cold_only:
        ratio = results["read all bytes, target (s)"] / results["inspect target (s)"]
        print(f"reading the target's bytes once takes {ratio:,.0f}x as long as inspecting it")


if __name__ == "__main__":
    main()
