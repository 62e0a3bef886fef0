"""draftlab train at the edges: a shallow target gets distinct aux layers (and says which), the default
draft vocabulary fits a small target, and an OUT the run did not finish is never left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draftlab.cli import main
from draftlab.compat import check_pair
from draftlab.errors import DraftlabError
from draftlab.toy.corpus import stdlib_text
from draftlab.train.trainer import TrainOptions, train


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> Path:
    text = stdlib_text("train", 4_000).decode("latin-1")
    path = tmp_path_factory.mktemp("edges") / "data.jsonl"
    path.write_text("".join(json.dumps({"text": text[i:i + 96]}) + "\n" for i in range(0, len(text), 96)))
    return path


def _train(toy_pair, rows: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--target", str(toy_pair.target_dir), "--data", str(rows), "--out", str(out), "--max-steps", "1",
            "--batch-size", "4", "--seq-len", "64", "--ttt-length", "2", *extra]


@pytest.mark.parametrize("layers", range(4, 17))
def test_default_aux_layers_are_distinct_and_capturable_at_any_depth(layers):
    from draftlab.train.setup import scratch_aux_layers

    aux = scratch_aux_layers(layers)
    assert len(set(aux)) == 3 and all(0 <= k <= layers - 2 for k in aux)
    if layers >= 8:
        assert aux == [1, layers // 2 - 1, layers - 4]  # the engines' own default where it works


def test_too_shallow_or_duplicate_aux_layers_are_refused():
    from draftlab.train.setup import scratch_aux_layers

    with pytest.raises(DraftlabError, match="3-layer target has 2 capturable"):
        scratch_aux_layers(3)
    with pytest.raises(DraftlabError, match="names a layer twice"):
        scratch_aux_layers(8, [1, 1, 2])


def test_from_scratch_on_a_4_layer_target_checks_in_both_engines_and_says_what_it_chose(toy_pair, rows,
                                                                                        tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*_train(toy_pair, rows, out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["aux_layers"] == [0, 1, 2] and doc["draft_vocab_size"] == 260
    notes = " ".join(doc["notes"])
    assert "aux layers 0, 1, 2" in notes and "draft vocabulary 260 tokens" in notes
    for engine in ("sglang", "vllm"):
        assert check_pair(out, toy_pair.target_dir, engine).ok, engine


def test_aux_layers_default_is_distinct_with_a_given_vocabulary(toy_pair, rows, tmp_path):
    out = tmp_path / "out"
    train(TrainOptions(target=toy_pair.target_dir, data=rows, out=out, max_steps=1, batch_size=4, seq_len=64,
                       ttt_length=2, draft_vocab_size=64))
    config = json.loads((out / "config.json").read_text())
    assert len(set(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])) == 3
    for engine in ("sglang", "vllm"):
        assert check_pair(out, toy_pair.target_dir, engine).ok, engine


def test_a_draft_vocabulary_larger_than_the_target_says_what_to_pass(toy_pair, rows, tmp_path, capsys):
    assert main(_train(toy_pair, rows, tmp_path / "out", "--draft-vocab-size", "1000")) == 2
    assert "pass --draft-vocab-size 260 or less" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["empty eval prompts", "partial speculation flags"])
def test_a_refused_input_leaves_no_out_and_the_rerun_works(toy_pair, rows, tmp_path, capsys, case):
    prompts = tmp_path / "eval.jsonl"
    prompts.write_text("" if case == "empty eval prompts" else json.dumps({"prompt": "def f(x):"}) + "\n")
    flags = ["--steps", "3"] if case == "partial speculation flags" else []
    out = tmp_path / "out"
    assert main([*_train(toy_pair, rows, out, "--eval-prompts", str(prompts), *flags)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not out.exists()
    assert main(_train(toy_pair, rows, out)) == 0  # not refused as "already exists"


def test_a_run_that_fails_before_its_first_checkpoint_removes_out(toy_pair, rows, tmp_path):
    out = tmp_path / "out"

    def fail(step: int) -> bool:
        assert out.is_dir()  # OUT was made, and holds the step's log
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        train(TrainOptions(target=toy_pair.target_dir, data=rows, out=out, max_steps=3, batch_size=4, seq_len=64,
                           ttt_length=2, draft_vocab_size=64, aux_layers=[0, 1, 2]), on_step=fail)
    assert not out.exists()


def test_a_deepseek_target_never_opens_its_aux_layers_with_layer_0(target_configs):
    """SGLang 0.5.13+ cannot name layer 0's output first for DeepSeek/Kimi targets: a shallow one spreads
    the three layers from 1."""
    from draftlab.checkpoint import TargetConfig
    from draftlab.engines import first_nameable
    from draftlab.train.setup import scratch_aux_layers

    deepseek = TargetConfig.from_dict({**target_configs["deepseek_v3"], "num_hidden_layers": 5})
    assert first_nameable(deepseek) == 1 and first_nameable(TargetConfig.from_dict(target_configs["llama"])) == 0
    assert scratch_aux_layers(5, first=1) == [1, 2, 3] and scratch_aux_layers(5) == [0, 2, 3]
    with pytest.raises(DraftlabError, match="at least 5 layers"):
        scratch_aux_layers(4, first=1)


def test_eval_counts_a_prompt_near_the_context_as_the_probe_does(toy_pair, tmp_path, capsys):
    """A held-out prompt that fits the context but leaves less than max_new_tokens + steps is measured up to
    the context (it used to be dropped silently): the eval's accept length is the probe's on the same file."""
    import json

    import torch

    from draftlab.cli import main
    from draftlab.engines.sglang_flags import exact_spec_flags
    from draftlab.models.pair import load_pair
    from draftlab.train.evaluate import Evaluator
    from draftlab.vocab.mapping import VocabMapping

    prompts = tmp_path / "held_out.jsonl"
    prompts.write_text(json.dumps({"input_ids": [65] * 2040}) + "\n" + json.dumps({"prompt": "import os\n"}) + "\n")
    pair = load_pair(toy_pair.target_dir, toy_pair.drafter_dir)
    t2d = torch.from_numpy(VocabMapping.from_drafter(toy_pair.drafter_dir).t2d)
    evaluate = Evaluator(pair.target, toy_pair.target_dir, prompts, exact_spec_flags(3, 1, 4), max_new_tokens=16,
                         t2d=t2d, ttt_length=3)
    assert len(evaluate.prompts) == 2 and len(evaluate.continuations[0]) == 8
    got = evaluate(pair.drafter)["accept_length"]
    assert main(["probe", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir), "--prompts",
                 str(prompts), "--steps", "3", "--topk", "1", "--num-draft-tokens", "4", "--max-new-tokens", "16",
                 "--json"]) == 0
    probed = json.loads(capsys.readouterr().out)
    assert len(probed["results"]) == 2
    assert got == probed["mean_accept_length"] and got > 1.0
