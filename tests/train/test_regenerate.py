"""draftlab regenerate: the target's greedy responses, from the runtime or a server, resumable."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from draftlab.cli import main
from draftlab.train.regenerate import regenerate

sys.path.insert(0, str(Path(__file__).parents[1] / "serve"))

CHATS = [[{"role": "user", "content": "def add(a, b):"}, {"role": "assistant", "content": "old answer"}],
         [{"role": "system", "content": "be brief"}, {"role": "user", "content": "import os"}],
         [{"role": "user", "content": "for i in"}, {"role": "assistant", "content": "x"},
          {"role": "user", "content": "while True:"}, {"role": "assistant", "content": "y"}]]


def _data(tmp_path: Path) -> Path:
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CHATS))
    return path


def _hf_greedy(target: Path, messages: list[dict], n: int) -> str:
    tok = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target)
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)[0, len(ids):].tolist()
    eos = model.generation_config.eos_token_id
    out = out[:out.index(eos)] if eos in out else out
    return tok.decode(out, skip_special_tokens=True)


def test_runtime_responses_are_the_targets_greedy_text_and_resume_fills_the_gap(toy_pair, tmp_path, capsys):
    data = _data(tmp_path)
    out = tmp_path / "regen.jsonl"
    code = main(["regenerate", "--data", str(data), "--out", str(out), "--target", str(toy_pair.target_dir),
                 "--max-new-tokens", "24", "--batch-size", "2", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["generated"] == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["messages"][:-1] for r in rows] == [CHATS[0][:1], CHATS[1], CHATS[2][:3]]
    for row in rows:
        assert row["messages"][-1]["role"] == "assistant"
        assert row["messages"][-1]["content"] == _hf_greedy(toy_pair.target_dir, row["messages"][:-1], 24)
    assert len({r["messages"][-1]["content"] for r in rows}) == 3
    assert not list(tmp_path.glob(".regen.jsonl.partial*"))

    again = tmp_path / "again.jsonl"  # a run killed after its first row: only the other two are generated
    (tmp_path / ".again.jsonl.partial0").write_text(json.dumps({"index": 0, "row": rows[0]}) + "\n{\"ind")
    result = regenerate(data, again, target=toy_pair.target_dir, max_new_tokens=24, batch_size=2, resume=True)
    assert (result.generated, result.resumed) == (2, 1)
    assert again.read_text() == out.read_text()


def test_server_responses_equal_the_runtime_ones(toy_pair, tmp_path):
    from pair_server import start

    from draftlab.serve.load import load_context

    data = _data(tmp_path)
    local = regenerate(data, tmp_path / "local.jsonl", target=toy_pair.target_dir, max_new_tokens=16)
    ctx = load_context(toy_pair.target_dir, toy_pair.drafter_dir, steps=3, topk=1, num_draft_tokens=4)
    server, url = start(ctx)
    try:
        served = regenerate(data, tmp_path / "served.jsonl", base_url=url, max_new_tokens=16, concurrency=2)
    finally:
        server.shutdown()
        ctx.engine.close()
    assert served.generated == 3 and local.generated == 3
    assert (tmp_path / "served.jsonl").read_text() == (tmp_path / "local.jsonl").read_text()


def test_non_conversation_rows_are_refused(tmp_path, capsys):
    data = tmp_path / "text.jsonl"
    data.write_text(json.dumps({"text": "hello"}) + "\n")
    code = main(["regenerate", "--data", str(data), "--out", str(tmp_path / "o.jsonl"), "--base-url", "http://x"])
    assert code == 2 and "conversation rows" in capsys.readouterr().err
