"""``torchrun -m draftlab probe``: two gloo processes, each decoding and probing its share of the
prompts, print the result one process gives (every per-prompt accept length and every figure)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import draftlab
from draftlab.documents import to_jsonable
from draftlab.probe.probe import probe

TEXTS = ["def __init__(self, name", "import os\nimport sys\n\n", "    for key, value in self.", "return self._",
         "class Config:\n    "]  # five: the ranks get three and two
FLAGS = {"steps": 4, "topk": 4, "num_draft_tokens": 8}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_give_the_single_process_result(toy_pair, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in TEXTS))
    single = to_jsonable(probe(toy_pair.target_dir, toy_pair.drafter_dir, prompts, max_new_tokens=40, **FLAGS))
    assert 1.5 < single["mean_accept_length"] < 4.5  # a pair that accepts some, not all

    src = str(Path(draftlab.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
           "-m", "draftlab", "probe", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
           "--prompts", str(prompts), "--max-new-tokens", "40", "--steps", "4", "--topk", "4",
           "--num-draft-tokens", "8", "--json"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sharded = json.loads(proc.stdout)  # rank 0 alone prints
    assert sharded["config"].pop("ranks") == 2
    for key in ("timings", "provenance"):
        sharded.pop(key), single.pop(key, None)
    assert sharded == single
