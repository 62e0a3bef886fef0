"""How close the probe's temperature > 0 estimate comes to sampled speculative decoding.

CPU, the trained toy pair (built once and cached by ``draftlab.toy``):
    python benchmarks/sampling_estimate.py --temperatures 0.3,0.7,1.0 --configs 3/1/4,2/2/4,4/4/8

For each temperature and config: ``draftlab generate`` decodes the prompts with sampling (several
seeds; the mean accept length over every cycle), and ``draftlab probe`` estimates the expected accept
length over continuations sampled with the same seeds. Prints one JSON line per pair and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from draftlab.decode.generate import generate
from draftlab.probe.probe import probe
from draftlab.toy import cached_toy_pair

TEXTS = ["def __init__(self, ", "import os\nimport sys\n\n", "    for i in range(len(", "class Foo(object):\n    "]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--temperatures", default="0.3,0.7,1.0")
    ap.add_argument("--configs", default="3/1/4,2/2/4,4/4/8")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args()
    torch.set_num_threads(1)
    pair = cached_toy_pair()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        prompts.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in TEXTS))
        for temperature in map(float, args.temperatures.split(",")):
            for label in args.configs.split(","):
                steps, topk, n = map(int, label.split("/"))
                flags = dict(steps=steps, topk=topk, num_draft_tokens=n, max_new_tokens=args.max_new_tokens,
                             temperature=temperature)
                sampled = statistics.mean(
                    a for seed in range(args.seeds)
                    for r in generate(pair.target_dir, pair.drafter_dir, prompts, seed=seed, **flags).results
                    for a in r.accept_lengths)
                estimate = statistics.mean(
                    probe(pair.target_dir, pair.drafter_dir, prompts, seed=seed, **flags).mean_accept_length
                    for seed in range(args.seeds))
                row = {"temperature": temperature, "config": label, "sampled": round(sampled, 3),
                       "estimate": round(estimate, 3), "error": round(estimate / sampled - 1, 4)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("\n| T | config | sampled generate | probe estimate | error |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['temperature']} | {r['config']} | {r['sampled']:.3f} | {r['estimate']:.3f} | {r['error']:+.1%} |")


if __name__ == "__main__":
    main()
