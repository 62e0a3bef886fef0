"""draftlab capture writes feature files that train --features and probe --features read, resumably."""

from __future__ import annotations

import json

import pytest
import torch

from draftlab.cli import main
from draftlab.probe.features import feature_files, read_sample
from draftlab.train.capture import capture, feature_path
from draftlab.train.trainer import TrainOptions, train


def _rows(tmp_path):
    data = tmp_path / "chats.jsonl"
    reply = "def f(x):\n    return x"
    convs = [[{"role": "user", "content": f"say {i}"}, {"role": "assistant", "content": reply * (1 + i % 3)}]
             for i in range(7)]
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in convs))
    return data


def test_capture_is_sharded_resumable_and_trains_like_the_live_target(toy_pair, tmp_path, capsys):
    data = _rows(tmp_path)
    out = tmp_path / "features"
    code = main(["capture", "--target", str(toy_pair.target_dir), "--data", str(data), "--out", str(out),
                 "--drafter", str(toy_pair.drafter_dir), "--shard", "3", "--batch-size", "2", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"] == 7 and doc["written"] == 7 and doc["aux_layers"] == [0, 1, 2]
    files = feature_files(out)
    assert len(files) == 7 and {f.parent.name for f in files} == {"rows_0-3", "rows_3-6", "rows_6-9"}
    sample = read_sample(files[0], hidden_size=64, num_aux=3)
    assert sample.final_hidden is not None and 0 < sum(sample.loss_mask) < len(sample.input_ids)

    victim = feature_path(out, 4, 3)
    before = {f: f.stat().st_mtime_ns for f in files if f != victim}
    saved = torch.load(victim, weights_only=True)
    victim.unlink()
    again = capture(toy_pair.target_dir, data, out, drafter=toy_pair.drafter_dir, shard=3, resume=True)
    assert (again.written, again.skipped) == (1, 6)
    assert all(f.stat().st_mtime_ns == t for f, t in before.items())
    redone = torch.load(victim, weights_only=True)
    assert torch.equal(saved["input_ids"], redone["input_ids"]) and torch.equal(saved["loss_mask"], redone["loss_mask"])
    for key in ("hidden_state", "aux_hidden_state"):  # now in a batch of its own: equal up to rounding
        torch.testing.assert_close(redone[key], saved[key], rtol=1e-4, atol=1e-5)

    common = dict(target=toy_pair.target_dir, init=toy_pair.drafter_dir, max_steps=3, batch_size=2, seq_len=2048,
                  lr=2e-3, ttt_length=2)
    train(TrainOptions(out=tmp_path / "online", data=data, **common))
    train(TrainOptions(out=tmp_path / "offline", features=out, **common))
    losses = [[json.loads(line)["loss"] for line in (tmp_path / d / "train_log.jsonl").read_text().splitlines()]
              for d in ("online", "offline")]
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)


def test_capture_refuses_an_existing_folder(toy_pair, tmp_path, capsys):
    (tmp_path / "f").mkdir()
    code = main(["capture", "--target", str(toy_pair.target_dir), "--data", str(_rows(tmp_path)), "--out",
                 str(tmp_path / "f")])
    assert code == 2 and "--resume" in capsys.readouterr().err
