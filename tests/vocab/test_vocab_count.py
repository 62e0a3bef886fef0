from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from transformers import AutoTokenizer

import draftlab.vocab.count as count_module
from draftlab.cli import main
from draftlab.errors import DraftlabError
from draftlab.vocab import count_tokens, read_counts

from .conftest import VOCAB
from .helpers import sentence, write_jsonl


def conversations(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    rng = random.Random(seed)
    convs = []
    for _ in range(n):
        turns = [{"role": "system", "content": "You are " + sentence(rng, 3)}] if rng.random() < 0.5 else []
        for _ in range(rng.randint(1, 3)):
            turns.append({"role": "user", "content": sentence(rng)})
            turns.append({"role": "assistant", "content": sentence(rng, rng.randint(2, 12))})
        convs.append(turns)
    return convs


def sharegpt(conv: list[dict[str, str]]) -> dict:
    names = {"user": "human", "assistant": "gpt", "system": "system"}
    return {"conversations": [{"from": names[m["role"]], "value": m["content"]} for m in conv]}


def expected_assistant_counts(tokenizer_dir: Path, convs: list[list[dict[str, str]]]) -> Counter:
    """Independent expectation for the ChatML template: each reply's own tokens plus <|im_end|>."""
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    end = tok.convert_tokens_to_ids("<|im_end|>")
    expected: Counter = Counter()
    for conv in convs:
        for m in conv:
            if m["role"] == "assistant":
                expected.update(tok(m["content"], add_special_tokens=False)["input_ids"] + [end])
    return expected


def test_text_rows_count_every_token(tmp_path: Path, target_plain: Path) -> None:
    rng = random.Random(1)
    texts = [sentence(rng, rng.randint(1, 20)) for _ in range(50)]
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in texts])
    counts = count_tokens([data], target_plain, workers=1)
    tok = AutoTokenizer.from_pretrained(str(target_plain))
    expected = Counter(i for t in texts for i in tok(t, add_special_tokens=False)["input_ids"])
    assert counts.counts == dict(expected)
    assert counts.vocab_size == VOCAB  # from the target's config.json, not the 300-token tokenizer
    assert counts.provenance["mode"] == "all-tokens" and counts.provenance["rows"]["text"] == 50


def test_chat_template_counts_only_assistant_tokens(tmp_path: Path, target_chat: Path) -> None:
    convs = conversations(40)
    data = write_jsonl(tmp_path / "d.jsonl", [{"messages": c} for c in convs])
    counts = count_tokens([data], target_chat, workers=1)
    assert counts.counts == dict(expected_assistant_counts(target_chat, convs))
    assert counts.provenance["mode"] == "assistant-tokens"


def test_generation_template_and_prefix_rendering_agree(tmp_path: Path, target_chat: Path,
                                                        target_generation: Path) -> None:
    convs = conversations(30, seed=3)
    data = write_jsonl(tmp_path / "d.jsonl", [{"messages": c} for c in convs])
    by_prefix = count_tokens([data], target_chat, workers=1).counts
    by_generation = count_tokens([data], target_generation, workers=1).counts
    assert by_prefix == by_generation and sum(by_prefix.values()) > 100


def test_replies_rewritten_in_history_are_counted_as_rendered(tmp_path: Path, target_thinking: Path) -> None:
    rng = random.Random(11)
    convs = []
    for _ in range(20):
        turns = []
        for _ in range(rng.randint(1, 3)):
            turns.append({"role": "user", "content": sentence(rng)})
            turns.append({"role": "assistant",
                          "content": f"<think>{sentence(rng, 4)}</think>\n\n{sentence(rng, 5)}"})
        convs.append(turns)
    data = write_jsonl(tmp_path / "d.jsonl", [{"messages": c} for c in convs])
    counts = count_tokens([data], target_thinking, workers=1)
    # earlier replies count as the template renders them (reasoning dropped), the last one in full
    tok = AutoTokenizer.from_pretrained(str(target_thinking))
    end = tok.convert_tokens_to_ids("<|im_end|>")
    expected: Counter = Counter()
    for conv in convs:
        for k, m in enumerate(conv):
            if m["role"] == "assistant":
                text = m["content"] if k == len(conv) - 1 else m["content"].split("</think>")[-1].strip()
                expected.update(tok(text, add_special_tokens=False)["input_ids"] + [end])
    assert counts.counts == dict(expected)


def test_sharegpt_rows_count_like_openai_rows(tmp_path: Path, target_chat: Path) -> None:
    convs = conversations(20, seed=5)
    openai = write_jsonl(tmp_path / "o.jsonl", [{"messages": c} for c in convs])
    share = write_jsonl(tmp_path / "s.jsonl", [sharegpt(c) for c in convs])
    a = count_tokens([openai], target_chat, workers=1)
    b = count_tokens([share], target_chat, workers=1)
    assert a.counts == b.counts and b.provenance["rows"]["conversations"] == 20


def test_pretokenized_rows_honour_loss_mask(tmp_path: Path, target_chat: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [
        {"input_ids": [5, 6, 7, 7], "loss_mask": [0, 1, 1, 0]},
        {"input_ids": [319, 5]},  # ids past the tokenizer but inside the padded vocabulary
    ])
    assert count_tokens([data], target_chat, workers=1).counts == {5: 1, 6: 1, 7: 1, 319: 1}


def test_parallel_workers_match_one_process(tmp_path: Path, target_chat: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(count_module, "BLOCK_BYTES", 2048)  # many blocks from a small file
    convs = conversations(120, seed=9)
    rows = [{"messages": c} if i % 2 else {"text": c[-1]["content"]} for i, c in enumerate(convs)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    one = count_tokens([data], target_chat, workers=1)
    two = count_tokens([data], target_chat, workers=2)
    assert one.counts == two.counts and one.provenance["rows"] == two.provenance["rows"]


def test_malformed_line_is_reported_with_file_and_line(tmp_path: Path, target_chat: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(count_module, "BLOCK_BYTES", 512)  # the bad line sits in a later block
    rows: list[object] = [{"text": sentence(random.Random(i))} for i in range(60)]
    rows[41] = '{"text": "unterminated'
    rows[50] = {"messages": [{"content": "no role"}]}
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / "counts.json"
    assert main(["vocab", "count", "--data", str(data), "--tokenizer", str(target_chat), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{data}: line 42: invalid JSON" in err and "--skip-bad-lines" in err and len(err.splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob(".counts.json*"))

    assert main(["vocab", "count", "--data", str(data), "--tokenizer", str(target_chat), "-o", str(out),
                 "--skip-bad-lines", "--json", "--workers", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["skipped_lines"] == 2 and doc["rows"]["text"] == 58
    saved = json.loads(out.read_text())
    assert set(saved) >= {"vocab_size", "num_tokens", "counts", "files", "tokenizer", "mode", "skipped_lines"}
    assert saved["skipped_examples"][1].endswith(":51: messages[0] has neither 'role' nor 'from'")
    assert read_counts(out).num_tokens == saved["num_tokens"] == doc["num_tokens"]


def test_bad_inputs_are_one_line_errors(tmp_path: Path, target_plain: Path, tokenizers_root: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(DraftlabError, match="empty.jsonl: has no usable rows"):
        count_tokens([empty], target_plain, workers=1)
    with pytest.raises(DraftlabError, match="no such data file"):
        count_tokens([tmp_path / "missing.jsonl"], target_plain)
    # a target whose config says fewer tokens than its tokenizer has
    small = tmp_path / "small"
    small.mkdir()
    for f in (tokenizers_root / "plain").iterdir():
        (small / f.name).write_bytes(f.read_bytes())
    (small / "config.json").write_text(json.dumps({"vocab_size": 100}))
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "def x"}])
    with pytest.raises(DraftlabError, match="tokenizer has 300 tokens but config.json says vocab_size 100"):
        count_tokens([data], small)


def test_byte_order_mark_is_accepted_and_impossible_ids_are_bad_lines(tmp_path: Path, target_plain: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_bytes(b'\xef\xbb\xbf{"input_ids": [4, 4]}\n{"input_ids": [1, 99999999999999999999999]}\n'
                     b'{"input_ids": [320]}\n')
    with pytest.raises(DraftlabError, match="line 2: input_ids hold a number too large"):
        count_tokens([data], target_plain)
    counts = count_tokens([data], target_plain, skip_bad_lines=True)
    assert counts.counts == {4: 2} and counts.provenance["skipped_lines"] == 2
    assert counts.provenance["skipped_examples"][1].endswith(
        ":3: input_ids hold 320, outside the target vocabulary [0, 320)")


PRETOKENIZED = [{"input_ids": [5, 6, 7, 7], "loss_mask": [0, 1, 1, 0]}, {"input_ids": [319, 5]}]


def test_input_ids_rows_count_without_a_tokenizer(tmp_path: Path, capsys) -> None:
    """--vocab-size alone, or a target folder with only config.json: no tokenizer is loaded."""
    data = write_jsonl(tmp_path / "ids.jsonl", PRETOKENIZED)
    out = tmp_path / "counts.json"
    assert main(["vocab", "count", "--data", str(data), "--vocab-size", "320", "-o", str(out)]) == 0
    counts = read_counts(out)
    assert counts.vocab_size == 320 and dict(counts.counts) == {6: 1, 7: 1, 319: 1, 5: 1}
    doc = json.loads(out.read_text())
    assert doc["mode"] == "pretokenized" and doc["tokenizer"] is None
    bare = tmp_path / "target"  # a target folder whose tokenizer files were not copied
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 400}))
    via_config = count_tokens([data], bare)
    assert via_config.vocab_size == 400 and dict(via_config.counts) == dict(counts.counts)


def test_other_rows_without_a_tokenizer_name_the_line(tmp_path: Path, capsys) -> None:
    data = write_jsonl(tmp_path / "mixed.jsonl", PRETOKENIZED + [{"text": "hello"}])
    with pytest.raises(DraftlabError, match=r"line 3: a 'text' row needs the target's tokenizer.*--tokenizer"):
        count_tokens([data], vocab_size=320)
    assert main(["vocab", "count", "--data", str(data), "-o", str(tmp_path / "c.json")]) == 2
    assert "--vocab-size" in capsys.readouterr().err
