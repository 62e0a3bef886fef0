"""Two gloo processes under torchrun give the weights one process gives on the same global batch."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

import draftlab
from draftlab.toy.corpus import stdlib_text
from draftlab.train.trainer import TrainOptions, train


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_processes_equal_one_process(toy_pair, tmp_path):
    text = stdlib_text("train", 4_000).decode("latin-1")
    rows = tmp_path / "data.jsonl"
    rows.write_text("".join(json.dumps({"text": text[i:i + 50 + i % 37]}) + "\n" for i in range(0, len(text), 90)))
    args = dict(max_steps=3, batch_size=4, grad_accum=2, seq_len=64, lr=2e-3, ttt_length=3)
    single = tmp_path / "one"
    train(TrainOptions(target=toy_pair.target_dir, data=rows, out=single, init=toy_pair.drafter_dir, **args))

    double = tmp_path / "two"
    src = str(Path(draftlab.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
           "-m", "draftlab", "train", "--target", str(toy_pair.target_dir), "--data", str(rows), "--out", str(double),
           "--init", str(toy_pair.drafter_dir), "--max-steps", "3", "--batch-size", "4", "--grad-accum", "2",
           "--seq-len", "64", "--lr", "2e-3", "--ttt-length", "3", "--json"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]

    one, two = load_file(str(single / "model.safetensors")), load_file(str(double / "model.safetensors"))
    moved = 0
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-6, msg=name)
        moved += not torch.equal(one[name], load_file(str(toy_pair.drafter_dir / "model.safetensors"))[name])
    assert moved >= 10  # the weights trained
    losses = [[json.loads(line)["loss"] for line in (f / "train_log.jsonl").read_text().splitlines()]
              for f in (single, double)]
    assert losses[0] == __import__("pytest").approx(losses[1], rel=1e-5)
