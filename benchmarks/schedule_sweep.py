"""Is the plan's per-batch-size schedule at least as fast as the best fixed draft length, under load?

CPU run (the toy pair; about 15 minutes on 2 busy cores):
    PYTHONPATH=src DRAFTLAB_THREADS=1 python benchmarks/schedule_sweep.py --out /tmp/schedule-sweep \
        --max-concurrency 8 --new-tokens 128 --requests-per-stream 4 --rounds 5 --repeats 30
GPU run (any pair; plan and every server on the device):
    PYTHONPATH=src python benchmarks/schedule_sweep.py --out /tmp/schedule-sweep --device cuda \
        [--target T --drafter D --dtype bfloat16]

1. ``draftlab plan --target --drafter --prompts --batch-sizes 1..N --grid 1/1/2,2/1/3,3/1/4,4/1/5 --served
   --save-costs --save-probe --json``: probe each chain, profile the batched passes at every batch size,
   time plain decoding served by ``draftlab serve`` at every batch size (``--served``:
   :mod:`draftlab.cost.served`), predict the server's tok/s; then ``plan --costs --probe --schedule vllm``
   chooses K per batch size by those predictions (where speculation loses at every batch size plan says
   so and writes no schedule: the schedule arm then serves without a drafter).
2. One ``draftlab serve --max-batch 48`` per arm (baseline, K = 1..4 fixed, the schedule), launched as
   ``draftlab sweep --engine draftlab --schedule`` launches them (every arm batches the requests in flight:
   static batches of c), all up at once and idle but for the arm being measured.
3. ``--rounds`` rounds; in each, every concurrency c in 1..N, and at each c every arm in an order that
   rotates from round to round (:func:`draftlab.bench.rounds.interleaved`): one bench run of c streams x
   ``--requests-per-stream`` requests after c warm-up requests (``--ignore-eos``, so every batch is full
   and ends together). Each arm's number is the median of its rounds, with its range.
4. One table: median measured tok/s (range), the plan's served prediction, the schedule against the best
   fixed arm with the noise rule of :mod:`draftlab.bench.rounds`.

Prints the commands, then the Markdown table (also written to OUT/table.md; every run in OUT/runs/ and
OUT/runs.json, the plan's measured costs in OUT/profile.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

from draftlab.bench.client import BenchConfig
from draftlab.bench.predicted import Predictions, load_predictions
from draftlab.bench.rounds import ArmStats, interleaved, noise_band, within_noise
from draftlab.bench.run import run_bench
from draftlab.bench.workload import load_prompts
from draftlab.engines.launch import (
    REFERENCE,
    SPEC_MAX_RUNNING_REQUESTS,
    EngineProcess,
    LaunchRequest,
    engine_command,
)
from draftlab.engines.schedule import LoadedSchedule, load_schedule
from draftlab.toy import cached_toy_pair
from draftlab.toy.corpus import stdlib_text

CHAINS = (1, 2, 3, 4)
ARMS = ("baseline", *(f"{k}/1/{k + 1}" for k in CHAINS), "schedule")
BASE_PORT = 30400


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


def plan_schedule(costs: Path, probes: Path, sizes: str, out: Path) -> LoadedSchedule | None:
    """The schedule ``plan --schedule vllm`` chooses from the measured costs and probes; None where it
    finds that speculation loses at every batch size (then the schedule arm serves without a drafter,
    as the refusal says to)."""
    argv = [sys.executable, "-m", "draftlab", "plan", "--costs", str(costs), "--probe", str(probes),
            "--batch-sizes", sizes, "--schedule", "vllm", "--schedule-out", str(out), "--json"]
    print("$ " + shlex.join(argv), flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode == 2 and "speculation loses at every" in done.stderr:
        print(done.stderr.strip(), flush=True)
        return None
    if done.returncode:
        raise SystemExit(done.stderr)
    return load_schedule(out)


def arm_k(arm: str, c: int, schedule: LoadedSchedule | None) -> int:
    """The draft length an arm runs at concurrency ``c`` (0: plain decoding)."""
    if arm == "baseline" or (arm == "schedule" and schedule is None):
        return 0
    return schedule.draft_length(c) if arm == "schedule" else int(arm.split("/")[0])


def server(arm: str, port: int, target: str, drafter: str, schedule: LoadedSchedule | None, cap: int,
           on_device: list[str]) -> LaunchRequest:
    """The arm's ``draftlab serve``, exactly as ``draftlab sweep --engine draftlab --schedule`` launches it."""
    k = None if arm in ("baseline", "schedule") else int(arm.split("/")[0])
    plain = arm == "baseline" or (arm == "schedule" and schedule is None)
    return LaunchRequest(
        engine=REFERENCE, target=target, drafter=None if plain else drafter,
        steps=k, topk=1 if k else None, num_draft_tokens=k + 1 if k else None, port=port,
        max_running_requests=cap, extra_args=("--max-batch", str(cap), *on_device),
        schedule=schedule if arm == "schedule" else None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-concurrency", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-bytes", type=int, default=32)
    ap.add_argument("--requests-per-stream", type=int, default=3, help="measured requests per run: this x c")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds: runs per arm and concurrency")
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
    (out / "runs").mkdir()
    toy = cached_toy_pair() if args.target is None else None
    target = str(args.target or toy.target_dir)
    drafter = str(args.drafter or toy.drafter_dir)
    on_device = ["--device", args.device, *(["--dtype", args.dtype] if args.dtype else [])]
    top = args.max_concurrency
    prompt_file = out / "prompts.jsonl"
    prompts(prompt_file, args.requests_per_stream * top, args.prompt_bytes, ids=toy is not None)
    plan_json, schedule_file = out / "plan.json", out / "schedule.json"
    costs, probes = out / "profile.json", out / "probes.json"
    sizes = ",".join(str(c) for c in range(1, top + 1))
    run([sys.executable, "-m", "draftlab", "plan", "--target", target, "--drafter", drafter, "--prompts",
         str(prompt_file), *on_device, "--batch-sizes", sizes,
         "--grid", ",".join(f"{k}/1/{k + 1}" for k in CHAINS), "--max-new-tokens", str(args.new_tokens),
         "--context", str(args.prompt_bytes + args.new_tokens // 2), "--repeats", str(args.repeats), "--served",
         "--save-costs", str(costs), "--save-probe", str(probes), "--json"], stdout=plan_json)
    schedule = plan_schedule(costs, probes, sizes, schedule_file)
    predictions = load_predictions(plan_json).served
    assert predictions is not None, "plan --served wrote no served predictions"
    loaded = load_prompts(prompt_file)
    cap = max(SPEC_MAX_RUNNING_REQUESTS, top)
    runs: list[dict] = []
    with ExitStack() as stack:
        urls = {}
        for i, arm in enumerate(ARMS):
            command = engine_command(server(arm, BASE_PORT + i, target, drafter, schedule, cap, on_device))
            print(f"$ {command.shell}  # {arm}", flush=True)
            proc = stack.enter_context(EngineProcess(command, out / f"server-{i}.log"))
            proc.start()
            urls[arm] = (proc, command.base_url)
        for proc, _ in urls.values():
            proc.wait_healthy(600)
        for r, order in enumerate(interleaved(ARMS, args.rounds)):
            for c in range(1, top + 1):
                for arm in order:
                    config = BenchConfig(base_url=urls[arm][1], api="sglang", concurrency=c, max_tokens=args.new_tokens,
                                         num_prompts=args.requests_per_stream * c, ignore_eos=True, warmup=c, label=arm)
                    result = run_bench(config, loaded)
                    (out / "runs" / f"r{r}-c{c}-{arm.replace('/', '_')}.json").write_text(json.dumps(asdict(result)))
                    runs.append({"round": r, "c": c, "arm": arm, "tps": result.output_throughput,
                                 "accept_length": result.accept_length, "failed": result.failed})
                print(f"round {r + 1}/{args.rounds} c={c}: " + ", ".join(
                    f"{x['arm']} {x['tps']:.0f}" for x in runs if x["round"] == r and x["c"] == c), flush=True)
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    table = render(runs, schedule, predictions, top)
    (out / "table.md").write_text(table)
    print(table)


def render(runs: list[dict], schedule: LoadedSchedule | None, predicted: Predictions, top: int) -> str:
    """Markdown: per concurrency, each arm's median tok/s [range] (served prediction), the schedule
    against the best fixed arm, the noise band and the worst prediction error; then each concurrency's
    median accept lengths (the schedule's must be its K's fixed arm's: the batch ran the K it was given)."""
    head = ("| c | K sched | " + " | ".join(ARMS) + " | best fixed | sched / best | noise band | within noise |"
            " worst pred. error |")
    lines = [head, "|" + "---|" * (len(ARMS) + 6)]
    for c in range(1, top + 1):
        stats = {a: ArmStats.of([x["tps"] for x in runs if x["c"] == c and x["arm"] == a and not x["failed"]])
                 for a in ARMS}
        pred = {a: predicted.chain(c, arm_k(a, c, schedule)) for a in ARMS}
        cells = [f"{s.median:.0f} [{s.low:.0f}-{s.high:.0f}] ({pred[a]:.0f})" for a, s in stats.items()]
        fixed = [a for a in ARMS if a != "schedule"]
        best = max(fixed, key=lambda a: stats[a].median)
        band = noise_band(list(stats.values()))
        ok = within_noise(stats["schedule"], stats[best], band)
        errors = [stats[a].median / pred[a] - 1 for a in ARMS]
        worst = max(errors, key=abs)
        lines.append(f"| {c} | {arm_k('schedule', c, schedule)} | " + " | ".join(cells)
                     + f" | {best} | {stats['schedule'].median / stats[best].median:.3f} | {band:.1%} | "
                     + f"{'yes' if ok else 'no'} | {worst:+.1%} |")
    lines.append("")
    for c in range(1, top + 1):
        accept = {a: ArmStats.of([x["accept_length"] or 1.0 for x in runs if x["c"] == c and x["arm"] == a]).median
                  for a in ARMS}
        lines.append(f"- c={c}: accept length " + ", ".join(f"{a} {v:.2f}" for a, v in accept.items()))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
