"""``draftlab train`` on the toy pair (CPU): does fine-tuning the drifted drafter, or training one from
scratch, raise the exact accept length on held-out prompts of the new target?

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/train_toy.py --out /tmp/train_toy.json

Target v2 is the demo's drifted version of the toy target (its layer-1+ matrices with relative
Gaussian noise 0.5, ``draftlab.demo.perturbed_copy``). Training rows: 256-byte windows of the toy
corpus' train split; eval: 16 prompts of 48 bytes from its held-out split, the target's own greedy
continuations of 64 tokens, chain 3/1/4, through ``draftlab probe`` (the exact accept length).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import torch

from draftlab.demo import perturbed_copy
from draftlab.probe.probe import probe
from draftlab.toy import cached_toy_pair
from draftlab.toy.corpus import stdlib_text
from draftlab.train.trainer import TrainOptions, train


def write_data(folder: Path) -> tuple[Path, Path]:
    text = stdlib_text("train", 200_000).decode("latin-1")
    rows = folder / "data.jsonl"
    rows.write_text("".join(json.dumps({"text": text[i:i + 256]}) + "\n" for i in range(0, len(text), 256)))
    held = stdlib_text("heldout", 40_000).decode("latin-1")
    prompts = folder / "eval.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": held[i:i + 48]}) + "\n" for i in range(0, 32_000, 2_000)))
    return rows, prompts


def accept(drafter: Path, target: Path, prompts: Path) -> float:
    return probe(target, drafter, prompts, steps=3, topk=1, num_draft_tokens=4, max_new_tokens=64).mean_accept_length


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--finetune-steps", type=int, default=40)
    parser.add_argument("--scratch-steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    pair = cached_toy_pair()
    work = Path(tempfile.mkdtemp(prefix="train-toy-"))
    v2 = perturbed_copy(pair.target_dir, work / "target-v2", scale=0.5)
    rows, prompts = write_data(work)
    result = {"date": time.strftime("%Y-%m-%d"), "machine": platform.machine(), "threads": torch.get_num_threads(),
              "v1_drafter_on_v1": accept(pair.drafter_dir, pair.target_dir, prompts),
              "v1_drafter_on_v2": accept(pair.drafter_dir, v2, prompts)}
    runs = {"finetune": dict(init=pair.drafter_dir, max_steps=args.finetune_steps, lr=1e-3,
                             warmup=args.finetune_steps // 10),
            "scratch": dict(max_steps=args.scratch_steps, lr=3e-3, warmup=20, draft_vocab_size=128,
                            aux_layers=[0, 1, 2])}
    for name, kw in runs.items():
        start = time.perf_counter()
        out = train(TrainOptions(target=v2, data=rows, out=work / name, batch_size=args.batch_size, seq_len=256,
                                 ttt_length=3, **kw))
        result[name] = {"steps": out.steps, "seconds": round(time.perf_counter() - start, 1),
                        "tokens_per_second": round(out.tokens_per_second), "final_loss": out.final_loss,
                        "accuracy_by_step": out.accuracy_by_step,
                        "accept_length_on_v2": accept(work / name, v2, prompts)}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
