"""train keeps a warm start's variant (flags and norm tensors, trained) and builds EAGLE-3.1 from scratch;
both outputs load with their variant and check clean in both engines."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from draftlab.checkpoint import drafter_config, open_checkpoint
from draftlab.cli import main
from draftlab.compat import check_pair
from draftlab.toy.corpus import stdlib_text
from draftlab.toy.variants import VARIANT_FLAGS, cached_variant_drafter
from draftlab.train.trainer import TrainOptions, train

NORMS = ("input_norm.", "fc_norm.")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    text = stdlib_text("train", 20_000)
    rows = [{"input_ids": list(text[i * 300:i * 300 + 48]), "loss_mask": [0] * 4 + [1] * 44} for i in range(12)]
    path = tmp_path_factory.mktemp("data") / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _options(toy_pair, data, out, **fields) -> TrainOptions:
    return TrainOptions(target=toy_pair.target_dir, out=out, data=data, max_steps=3, batch_size=4, seq_len=48,
                        lr=5e-3, ttt_length=3, **fields)


@pytest.mark.parametrize("name", sorted(VARIANT_FLAGS))
def test_warm_start_keeps_the_variant_and_trains_its_norms(toy_pair, data, tmp_path, name):
    init = cached_variant_drafter(toy_pair, name)
    train(_options(toy_pair, data, tmp_path / "out", init=init))
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert all(config.get(flag) is True for flag in VARIANT_FLAGS[name])
    before, after = load_file(str(init / "model.safetensors")), load_file(str(tmp_path / "out" / "model.safetensors"))
    norms = sorted(k for k in before if k.startswith(NORMS))
    assert norms and norms == sorted(k for k in after if k.startswith(NORMS))
    assert any(not torch.equal(before[k], after[k]) for k in norms)  # trained, not copied
    assert drafter_config(open_checkpoint(tmp_path / "out")).variant == drafter_config(open_checkpoint(init)).variant
    for engine in ("sglang", "vllm"):
        result = check_pair(tmp_path / "out", toy_pair.target_dir, engine)
        assert result.ok, [f.code for f in result.findings if f.severity == "error"]
    # norm_output's two meanings: a flat config cannot say which, so check warns on the init; the trained
    # output says it fed norm(out) forward, as this trainer does and the engines serve
    def warned(path) -> bool:
        return "norm-output-meaning" in {f.code for f in check_pair(path, toy_pair.target_dir, "sglang").findings}

    assert not warned(tmp_path / "out")
    assert warned(init) is ("norm_output" in VARIANT_FLAGS[name])


def test_from_scratch_builds_eagle3_1(toy_pair, data, tmp_path):
    train(_options(toy_pair, data, tmp_path / "out", variant="eagle3.1", draft_vocab_size=64))
    ckpt = open_checkpoint(tmp_path / "out")
    assert ckpt.config["fc_norm"] is True and ckpt.config["norm_output"] is True
    assert sorted(n for n in ckpt.tensors if n.startswith("fc_norm.")) == [f"fc_norm.{i}.weight" for i in range(3)]
    for engine in ("sglang", "vllm"):
        assert check_pair(tmp_path / "out", toy_pair.target_dir, engine).ok


def test_variant_with_a_warm_start_is_a_usage_error(toy_pair, data, tmp_path, capsys):
    code = main(["train", "--target", str(toy_pair.target_dir), "--data", str(data), "--init",
                 str(toy_pair.drafter_dir), "--variant", "eagle3.1", "--max-steps", "1", "--out", str(tmp_path / "o")])
    assert code == 2 and "keeps the variant of --init" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_from_scratch_on_an_mla_target_trains_an_mla_drafter_that_is_accepted(tmp_path):
    """The toy DeepSeek-V3 target (MLA, YaRN): the drafter is the engines' MLA one with the target's MLA
    dimensions, and after a minute of training its drafts are accepted."""
    from draftlab.probe.probe import probe
    from draftlab.toy.mla import cached_mla_toy

    toy = cached_mla_toy()
    text = stdlib_text("train", 200_000)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"input_ids": list(text[i * 64:(i + 1) * 64])}) + "\n" for i in range(2000)))
    train(TrainOptions(target=toy.target_dir, out=tmp_path / "out", data=data, max_steps=60, batch_size=16, seq_len=64,
                       lr=3e-3, ttt_length=3, draft_vocab_size=128))
    config = drafter_config(open_checkpoint(tmp_path / "out"))
    target = json.loads((toy.target_dir / "config.json").read_text())
    assert config.architecture == "Eagle3DeepseekV2ForCausalLM" and config.variant.mla is not None
    assert config.variant.mla.kv_lora_rank == target["kv_lora_rank"] and config.rope.scaling["rope_type"] == "yarn"
    for engine in ("sglang", "vllm"):
        result = check_pair(tmp_path / "out", toy.target_dir, engine)
        assert result.ok, [(f.code, f.message) for f in result.findings if f.severity == "error"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": list(p)}) + "\n"
                               for p in (b"def __init__(self", b"import os\n", b"    return self._", b"for i in range(")))
    result = probe(toy.target_dir, tmp_path / "out", prompts, steps=3, topk=1, num_draft_tokens=4, max_new_tokens=32)
    assert result.mean_accept_length > 1.5
