"""Is the plan's per-batch-size schedule at least as fast as the best fixed draft length, under load?

CPU run (the toy pair; about 15 minutes on 2 busy cores):
    PYTHONPATH=src python benchmarks/schedule_sweep.py --out /tmp/schedule-sweep --max-concurrency 8 \
        --new-tokens 128 --requests-per-stream 8 --repeats 30
GPU run (any pair; plan and every server on the device):
    PYTHONPATH=src python benchmarks/schedule_sweep.py --out /tmp/schedule-sweep --device cuda \
        [--target T --drafter D --dtype bfloat16]

1. ``draftlab plan --target --drafter --prompts --batch-sizes 1..N --grid 1/1/2,2/1/3,3/1/4,4/1/5 --schedule vllm
   --schedule-out schedule.json --json``: probe each chain, profile the batched passes at every batch
   size, predict, choose K per batch size (the plan's batch sizes are every concurrency, so no batch
   falls between planned sizes).
2. For each concurrency c in 1..N: ``draftlab sweep --engine draftlab --grid "c,0,0,0 c,1,1,2 ... c,4,1,5"
   --schedule schedule.json --predicted plan.json --num-prompts 3c --warmup c --ignore-eos``: the reference
   server batches the c requests in flight (static batches of c) on every entry; one sweep per c so every
   batch is full.
3. One table: measured and predicted tok/s per arm and concurrency, the schedule against the best fixed K.

Prints the commands, then the Markdown table (also written to OUT/table.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from draftlab.toy import cached_toy_pair
from draftlab.toy.corpus import stdlib_text

CHAINS = (1, 2, 3, 4)


def run(argv: list[str], stdout: Path | None = None) -> None:
    print("$ " + shlex.join(argv) + (f" > {stdout}" if stdout else ""), flush=True)
    with open(stdout, "w") if stdout else open("/dev/null", "w") as out:
        subprocess.run(argv, check=True, stdout=out if stdout else None)


def prompts(path: Path, n: int, length: int, *, ids: bool) -> None:
    """``n`` held-out stdlib snippets of ``length`` bytes: token ids (``ids``: the toy vocabulary is bytes),
    else text for the target's tokenizer."""
    text = stdlib_text("heldout", n * length * 4)
    pieces = [text[i * length * 3:i * length * 3 + length] for i in range(n)]
    rows = [{"input_ids": list(p)} if ids else {"prompt": p.decode(errors="ignore")} for p in pieces]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-concurrency", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-bytes", type=int, default=32)
    ap.add_argument("--requests-per-stream", type=int, default=3, help="measured requests per entry: this x c")
    ap.add_argument("--repeats", type=int, default=10, help="plan's timed calls per pass")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--target", type=Path, default=None, help="default: the toy pair")
    ap.add_argument("--drafter", type=Path, default=None)
    ap.add_argument("--threads", default="1", help="DRAFTLAB_THREADS for plan and every server (1: no OpenMP "
                    "spinning on a shared machine)")
    args = ap.parse_args()
    os.environ["DRAFTLAB_THREADS"] = args.threads
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=False)
    toy = cached_toy_pair() if args.target is None else None
    target = str(args.target or toy.target_dir)
    drafter = str(args.drafter or toy.drafter_dir)
    on_device = ["--device", args.device, *(["--dtype", args.dtype] if args.dtype else [])]
    py = [sys.executable, "-m", "draftlab"]
    prompt_file = out / "prompts.jsonl"
    prompts(prompt_file, args.requests_per_stream * args.max_concurrency, args.prompt_bytes, ids=toy is not None)
    batches = ",".join(str(c) for c in range(1, args.max_concurrency + 1))
    grid = ",".join(f"{k}/1/{k + 1}" for k in CHAINS)
    plan_json, schedule = out / "plan.json", out / "schedule.json"
    run([*py, "plan", "--target", target, "--drafter", drafter, "--prompts", str(prompt_file), *on_device,
         "--batch-sizes", batches, "--grid", grid, "--max-new-tokens",
         str(args.new_tokens), "--context", str(args.prompt_bytes + args.new_tokens // 2), "--repeats", str(args.repeats),
         "--schedule", "vllm", "--schedule-out", str(schedule), "--json"], stdout=plan_json)
    rows = []
    for c in range(1, args.max_concurrency + 1):
        entries = " ".join([f"{c},0,0,0", *(f"{c},{k},1,{k + 1}" for k in CHAINS)])
        summary = out / f"sweep-c{c}"
        run([*py, "sweep", "--engine", "draftlab", "--target", target, "--drafter", drafter, "--prompts",
             str(prompt_file), "--grid", entries, "--schedule", str(schedule),
             "--predicted", str(plan_json), "--num-prompts", str(args.requests_per_stream * c), "--warmup", str(c), "--max-tokens",
             str(args.new_tokens), "--ignore-eos", "--health-timeout", "300", "--out", str(summary), "--json",
             "--", *on_device],
            stdout=out / f"sweep-c{c}.json")
        rows += json.loads((summary / "sweep.json").read_text())["rows"]
    table = render(rows, json.loads(schedule.read_text()), args.max_concurrency)
    (out / "table.md").write_text(table)
    print(table)


def render(rows: list[dict], schedule: dict, top: int) -> str:
    """Markdown: one line per concurrency, measured (predicted) tok/s per arm, schedule vs the best fixed K."""
    arms = ["baseline", *(f"{k}/1/{k + 1}" for k in CHAINS), "schedule"]
    head = "| c | K sched | " + " | ".join(arms) + " | best fixed | sched / best | worst pred. error |"
    lines = [head, "|" + "---|" * (len(arms) + 5)]
    ranges = schedule["num_speculative_tokens_per_batch_size"]
    for c in range(1, top + 1):
        by = {r["config"]: r for r in rows if r["batch"] == c}
        k = next(kk for lo, hi, kk in ranges if lo <= c <= hi) if any(lo <= c <= hi for lo, hi, _ in ranges) \
            else ranges[-1][2]
        cells = []
        for arm in arms:
            r = by.get(arm)
            if r is None or r["error"]:
                cells.append("failed")
                continue
            pred = "-" if r["predicted_throughput"] is None else f"{r['predicted_throughput']:.0f}"
            cells.append(f"{r['output_throughput']:.0f} ({pred})")
        fixed = [by[a] for a in arms[:-1] if a in by and not by[a]["error"]]
        best = max(fixed, key=lambda r: r["output_throughput"])
        sched = by.get("schedule")
        ratio = "-" if not sched or sched["error"] else f"{sched['output_throughput'] / best['output_throughput']:.3f}"
        errors = [abs(r["prediction_error"]) for r in by.values() if r.get("prediction_error") is not None]
        lines.append(f"| {c} | {k} | " + " | ".join(cells) + f" | {best['config']} | {ratio} | "
                     + (f"{max(errors):.1%}" if errors else "-") + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
