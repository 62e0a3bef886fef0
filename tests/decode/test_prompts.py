import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from draftlab.decode.prompts import read_prompts
from draftlab.errors import DraftlabError

WORDS = ["<s>", "hello", "world", "user", "assistant", ":", "\n"]
TEMPLATE = "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant :{% endif %}"


@pytest.fixture
def tokenizer_dir(tmp_path):
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<s>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<s>")
    fast.chat_template = TEMPLATE
    folder = tmp_path / "target"
    fast.save_pretrained(folder)
    return folder


def _write(tmp_path, rows):
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_three_row_kinds_become_token_ids(tmp_path, tokenizer_dir):
    path = _write(tmp_path, [{"input_ids": [3, 1]}, "", {"prompt": "hello world"},
                             {"messages": [{"role": "user", "content": "hello"}]}])
    prompts = read_prompts(path, tokenizer_dir=tokenizer_dir, vocab_size=len(WORDS))
    assert [p.line for p in prompts] == [1, 3, 4]
    assert prompts[0].input_ids == [3, 1]
    assert prompts[1].input_ids == [1, 2]
    assert prompts[2].input_ids == [3, 5, 1, 4, 5]  # "user : hello" + generation prompt "assistant :"


def test_input_ids_rows_need_no_tokenizer(tmp_path):
    path = _write(tmp_path, [{"input_ids": [0, 1, 2]}])
    assert read_prompts(path, tokenizer_dir=tmp_path / "none", vocab_size=3)[0].input_ids == [0, 1, 2]


@pytest.mark.parametrize(
    ("rows", "message"),
    [([], "no prompts"), (["", "  "], "no prompts"), (["{oops"], ":1: invalid JSON"),
     ([{"input_ids": [1], "prompt": "x"}], "exactly one of"), ([{"text": "x"}], "exactly one of"),
     ([{"input_ids": []}], "empty"), ([{"input_ids": [1, "2"]}], "list of integers"),
     ([{"input_ids": [1]}, {"input_ids": [99]}], ":2: token id 99 is outside")],
)
def test_bad_rows_name_the_line_and_the_problem(tmp_path, tokenizer_dir, rows, message):
    path = _write(tmp_path, rows) if rows else tmp_path / "empty.jsonl"
    if not rows:
        path.write_text("")
    with pytest.raises(DraftlabError, match=message):
        read_prompts(path, tokenizer_dir=tokenizer_dir, vocab_size=len(WORDS))


def test_text_rows_without_a_tokenizer_say_to_use_input_ids(tmp_path):
    path = _write(tmp_path, [{"prompt": "hello"}])
    with pytest.raises(DraftlabError, match="give input_ids rows"):
        read_prompts(path, tokenizer_dir=tmp_path, vocab_size=10)


def test_missing_file(tmp_path):
    with pytest.raises(DraftlabError, match="not found"):
        read_prompts(tmp_path / "nope.jsonl", tokenizer_dir=tmp_path, vocab_size=10)
