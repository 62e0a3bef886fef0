"""The toy pair: loadable by the runtime, and a drafter that agrees with its target often but not always."""

from __future__ import annotations

import json

import pytest
import torch

from draftlab.checkpoint import DrafterConfig, open_checkpoint
from draftlab.engines import aux_layers
from draftlab.models import Eagle3Drafter, TargetRunner
from draftlab.toy import train
from draftlab.toy.corpus import stdlib_text
from draftlab.toy.tokenizer import ASSISTANT, END, USER, byte_tokenizer


@pytest.fixture(scope="module")
def loaded(toy_pair):
    drafter_cfg = DrafterConfig.from_dict(json.loads((toy_pair.drafter_dir / "config.json").read_text()))
    target = TargetRunner.load(toy_pair.target_dir)
    target = TargetRunner(target.model, aux_layers=aux_layers("sglang", drafter_cfg, target.config.num_layers).layers)
    return target, Eagle3Drafter.load(toy_pair.drafter_dir, target=target)


@pytest.fixture(scope="module")
def heldout(loaded):
    target, _ = loaded
    tokens = torch.frombuffer(bytearray(stdlib_text("heldout", 20_000)), dtype=torch.uint8).long()
    windows = tokens[: 16 * 64].view(16, 64)
    feats, logits = train.target_features(target, windows, lambda k: None)
    return windows, feats, logits


def test_drafter_agrees_with_target_often_but_not_always(loaded, heldout) -> None:
    _, drafter = loaded
    agreement = train.agreement(drafter, *heldout)
    assert 0.3 < agreement < 0.95


def test_unrolled_steps_feeding_own_hidden_also_agree(loaded, heldout) -> None:
    _, drafter = loaded
    t2d = torch.zeros(drafter.config.vocab_size, dtype=torch.bool)
    t2d[drafter.to_target_ids(torch.arange(drafter.config.draft_vocab_size))] = True
    with torch.no_grad():
        _, per_step = train.ttt_loss(drafter, *heldout, t2d, unroll=3)
    assert all(0.2 < acc < 0.95 for acc in per_step), per_step


def test_pair_layout_vocab_and_aux_ids(toy_pair, loaded) -> None:
    target, drafter = loaded
    ckpt = open_checkpoint(toy_pair.drafter_dir)
    assert "embed_tokens.weight" not in ckpt.tensors and {"d2t", "t2d", "midlayer.hidden_norm.weight"} <= set(ckpt.tensors)
    assert drafter.embed_tokens is target.embed_tokens
    assert drafter.config.draft_vocab_size == 128 < drafter.config.vocab_size == 260
    ids = drafter.to_target_ids(torch.arange(128))
    assert torch.all(ids[1:] > ids[:-1])  # sorted ascending, no repeats
    cfg = DrafterConfig.from_dict(ckpt.config)
    assert aux_layers("sglang", cfg, 4).layers == aux_layers("vllm", cfg, 4).layers == [0, 1, 2]
    assert target.eos_token_ids == {END}


def test_byte_tokenizer_and_chat_template(toy_pair) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_pair.target_dir, local_files_only=True)
    assert tok("a\né")["input_ids"] == list("a\né".encode())
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert ids == [USER, ord("h"), ord("i"), END, ASSISTANT]
    assert len(byte_tokenizer()) == 260


def test_train_and_heldout_text_differ() -> None:
    train_text, held = stdlib_text("train", 5000), stdlib_text("heldout", 5000)
    assert len(train_text) == len(held) == 5000 and train_text != held
