"""Without a drafter nothing is captured: `serve` (one request at a time and batched), `regenerate` and `profile`
run a 3-layer target, whose default aux layers [1, 0, -1] do not exist, as they run any target (generate's
--no-draft: tests/decode/test_plain_decode.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from draftlab.checkpoint.synth import write_target
from draftlab.cli import main
from draftlab.serve.engine import Job
from draftlab.serve.load import load_context
from draftlab.train.regenerate import regenerate

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.fixture(scope="module")
def short_target(toy_pair, tmp_path_factory) -> Path:
    """The toy target's shape and tokenizer with three decoder layers (random weights)."""
    config = json.loads((toy_pair.target_dir / "config.json").read_text()) | {"num_hidden_layers": 3}
    folder = write_target(tmp_path_factory.mktemp("short") / "target", config)
    for name in TOKENIZER_FILES:
        shutil.copy(toy_pair.target_dir / name, folder / name)
    return folder


@pytest.mark.parametrize("max_batch", [1, 4])
def test_serve_without_a_drafter_loads_a_short_target(short_target, max_batch):
    ctx = load_context(short_target, None, max_batch=max_batch)
    try:
        assert ctx.spec is None
        commits = list(ctx.engine.submit(Job(list(b"def add("), 5, 0.0, True, None)))
        assert sum(len(c.tokens) for c in commits) == 5
    finally:
        ctx.engine.close()


def test_regenerate_runs_a_short_target(short_target, tmp_path):
    data = tmp_path / "chats.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "def add(a, b):"}]}) + "\n")
    regenerate(data, tmp_path / "out.jsonl", target=short_target, max_new_tokens=4)
    row = json.loads((tmp_path / "out.jsonl").read_text())
    assert row["messages"][-1]["role"] == "assistant"


def test_profile_without_a_drafter_times_a_short_target_capturing_nothing(short_target, tmp_path, capsys):
    out = tmp_path / "profile.json"
    code = main(["profile", "--target", str(short_target), "--device", "cpu", "--warmup", "0", "--repeats", "1",
                 "--batch-sizes", "1", "--verify-tokens", "1,2", "--context", "8", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code in (0, None), captured.err
    doc = json.loads(captured.out)
    assert [v["tokens"] for v in doc["verify"]] == [1, 2] and doc["deployment"]["captured_layers"] is None
