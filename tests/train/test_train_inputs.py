"""Training inputs: feature files train as the live target does, chat rows get vocab count's mask,
--remap goes through vocab remap, Ctrl-C leaves a checkpoint that --resume continues."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import draftlab
from draftlab.models.target import TargetRunner
from draftlab.toy.corpus import stdlib_text
from draftlab.train.data import tokenized_rows
from draftlab.train.trainer import TrainOptions, train
from draftlab.vocab.count import count_tokens
from draftlab.vocab.mapping import VocabMapping
from draftlab.vocab.tokenizer import load_tokenizer


def _id_rows(n: int = 12, length: int = 40, seed: int = 0) -> list[dict]:
    text = stdlib_text("train", 20_000)
    rows = []
    for i in range(n):
        ids = list(text[i * 300:i * 300 + length - i % 10])
        mask = [0] * 5 + [1] * (len(ids) - 5)
        rows.append({"input_ids": ids, "loss_mask": mask})
    return rows


def _losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "train_log.jsonl").read_text().splitlines()]


def test_feature_files_train_like_the_live_target(toy_pair, tmp_path):
    rows = _id_rows()
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runner = TargetRunner.load(toy_pair.target_dir, aux_layers=[0, 1, 2], cache="dynamic")
    folder = tmp_path / "features" / "rows_0"
    folder.mkdir(parents=True)
    for i, r in enumerate(rows):  # SpecForge's offline layout
        step = runner.forward_batch(torch.tensor([r["input_ids"]]))
        torch.save({"input_ids": torch.tensor(r["input_ids"]), "loss_mask": torch.tensor(r["loss_mask"]),
                    "hidden_state": step.hidden, "aux_hidden_state": step.aux}, folder / f"data_{i}.ckpt")
    common = dict(target=toy_pair.target_dir, init=toy_pair.drafter_dir, max_steps=4, batch_size=4, seq_len=64,
                  lr=2e-3, ttt_length=3)
    train(TrainOptions(out=tmp_path / "online", data=data, **common))
    train(TrainOptions(out=tmp_path / "offline", features=tmp_path / "features", **common))
    assert _losses(tmp_path / "offline") == pytest.approx(_losses(tmp_path / "online"), rel=1e-4)
    a = load_file(str(tmp_path / "online" / "model.safetensors"))
    b = load_file(str(tmp_path / "offline" / "model.safetensors"))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-3, atol=1e-5)


def test_feature_files_without_the_final_state_are_refused(toy_pair, tmp_path, capsys):
    from draftlab.cli import main

    folder = tmp_path / "features"
    folder.mkdir()
    torch.save({"input_ids": torch.arange(8), "hidden_states": [torch.zeros(8, 64)] * 3}, folder / "data_0.pt")
    code = main(["train", "--target", str(toy_pair.target_dir), "--features", str(folder), "--out",
                 str(tmp_path / "o"), "--init", str(toy_pair.drafter_dir), "--max-steps", "1"])
    assert code == 2 and "no final hidden state" in capsys.readouterr().err


def test_chat_rows_train_on_the_tokens_vocab_count_counts(toy_pair, tmp_path):
    chats = tmp_path / "chats.jsonl"
    convs = [[{"role": "user", "content": f"question {i}?"}, {"role": "assistant", "content": f"answer number {i}."},
              {"role": "user", "content": "more"}, {"role": "assistant", "content": "x" * i}] for i in range(1, 6)]
    chats.write_text("".join(json.dumps({"messages": c}) + "\n" for c in convs))
    rows = tokenized_rows(chats, load_tokenizer(toy_pair.target_dir), 260, seq_len=10_000)
    counted = np.zeros(260, dtype=np.int64)
    for row in rows:
        mask = list(row.loss_mask)
        mask[-1] = 1  # the row's last token leaves the loss (nothing after it to predict); vocab count counts it
        counted += np.bincount(np.asarray(row.input_ids)[np.asarray(mask, dtype=bool)], minlength=260)
    assert np.array_equal(counted, count_tokens([chats], toy_pair.target_dir, workers=1).dense(260))
    assert all(0 < sum(r.loss_mask) < len(r.input_ids) - 1 for r in rows)  # user turns are not trained on


def test_remap_rebuilds_the_vocabulary_through_vocab_remap(toy_pair, tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _id_rows()))
    counts = tmp_path / "counts.json"
    dense = np.zeros(260, dtype=np.int64)
    dense[200:260] = 1000  # tokens the old vocabulary mostly lacks
    dense[:128] = np.arange(128)
    counts.write_text(json.dumps({"vocab_size": 260, "num_tokens": int(dense.sum()),
                                  "counts": {str(i): int(c) for i, c in enumerate(dense) if c}}))
    out = tmp_path / "out"
    result = train(TrainOptions(target=toy_pair.target_dir, data=data, out=out, init=toy_pair.drafter_dir,
                                remap=counts, max_steps=1, batch_size=4, seq_len=64, lr=0.0, ttt_length=2))
    assert result.vocab == "remapped"
    new = VocabMapping.from_drafter(out)
    old = VocabMapping.from_drafter(toy_pair.drafter_dir)
    assert set(range(200, 260)) <= set(new.target_ids.tolist()) and not np.array_equal(new.d2t, old.d2t)
    head_old = load_file(str(toy_pair.drafter_dir / "model.safetensors"))["lm_head.weight"]
    head_new = load_file(str(out / "model.safetensors"))["lm_head.weight"]
    old_row = {t: i for i, t in enumerate(old.target_ids.tolist())}
    for i, t in enumerate(new.target_ids.tolist()):  # lr 0: rows of kept tokens moved bit for bit
        if t in old_row:
            assert torch.equal(head_new[i], head_old[old_row[t]])
    assert not list(tmp_path.glob(".out.staging*"))


def test_ctrl_c_writes_a_checkpoint_that_resume_continues(toy_pair, tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _id_rows(40)))
    out = tmp_path / "out"
    src = str(Path(draftlab.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    args = ["--target", str(toy_pair.target_dir), "--data", str(data), "--out", str(out), "--init",
            str(toy_pair.drafter_dir), "--max-steps", "100000", "--batch-size", "4", "--seq-len", "64",
            "--ttt-length", "2", "--json"]
    proc = subprocess.Popen([sys.executable, "-m", "draftlab", "train", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    log = out / "train_log.jsonl"
    deadline = time.monotonic() + 120
    while not (log.is_file() and len(log.read_text().splitlines()) >= 3):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    doc = json.loads(stdout)
    assert doc["interrupted"] and doc["steps"] >= 3
    assert (out / "training_state.pt").is_file() and (out / "model.safetensors").is_file()
    resumed = train(TrainOptions(target=toy_pair.target_dir, data=data, out=out, init=toy_pair.drafter_dir,
                                 max_steps=doc["steps"] + 2, batch_size=4, seq_len=64, ttt_length=2, resume=True))
    assert resumed.steps == doc["steps"] + 2
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == list(range(1, resumed.steps + 1))
