"""The MTP drafter's own contract: its cache gives what one pass over all rows gives (``keep`` of nothing
and ``crop`` undo draft passes), each engine's rules are computed (vLLM zeroes the embedding at position 0
and feeds the layer's pre-norm output back; SGLang feeds the final norm's output back), and a target that
ships no MTP layer is refused in one line."""

from __future__ import annotations

import json

import pytest
import torch

from draftlab.cli import main
from draftlab.engines.mtp_head import MtpServing
from draftlab.errors import DraftlabError
from draftlab.models.mtp import load_mtp, mtp_layout, names_mtp

TOKENS = torch.tensor(list(b"def keep(self, indices):\n    return"))


@pytest.fixture(scope="module")
def loaded(mtp_toy):
    return {engine: load_mtp(mtp_toy.target_dir, MtpServing(engine)) for engine in ("sglang", "vllm")}


def _inputs(runner) -> tuple[torch.Tensor, torch.Tensor]:
    runner.reset()
    hidden = runner.forward(TOKENS).aux
    return TOKENS[1:], hidden[:-1]


def test_the_cache_gives_one_pass_over_all_rows(loaded):
    runner, head = loaded["sglang"]
    ids, hidden = _inputs(runner)
    head.reset()
    whole = head.forward(ids, hidden)
    head.reset()
    first = head.forward(ids[:10], hidden[:10])
    head.forward(ids[10:14], hidden[10:14])  # a draft pass, dropped again
    head.keep(torch.empty(0, dtype=torch.long))
    assert head.cache_len == 10
    head.forward(ids[10:12], hidden[10:12])
    head.crop(10)
    rest = head.forward(ids[10:], hidden[10:])
    torch.testing.assert_close(torch.cat([first.logits, rest.logits]), whole.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.cat([first.hidden, rest.hidden]), whole.hidden, rtol=1e-5, atol=1e-5)


def test_vllm_ignores_the_token_at_position_0_and_sglang_reads_it(loaded):
    for engine, ignored in (("vllm", True), ("sglang", False)):
        runner, head = loaded[engine]
        ids, hidden = _inputs(runner)
        other = ids.clone()
        other[0] = (int(ids[0]) + 1) % 256
        head.reset()
        a = head.forward(ids, hidden).logits
        head.reset()
        b = head.forward(other, hidden).logits
        assert torch.equal(a, b) == ignored, engine


def test_the_hidden_state_fed_back_is_each_engines(loaded):
    """Away from position 0 both engines compute the same logits; SGLang feeds back the final norm of what
    vLLM feeds back."""
    (runner, sglang), (_, vllm) = loaded["sglang"], loaded["vllm"]
    ids, hidden = _inputs(runner)
    n = ids.numel()
    args = (ids[None], hidden[None], torch.arange(1, n + 1)[None], torch.ones(n, n, dtype=torch.bool).tril()[None])
    with torch.no_grad():
        s_logits, s_hidden, _ = sglang.forward_masked(*args)
        v_logits, v_hidden, _ = vllm.forward_masked(*args)
        torch.testing.assert_close(s_logits, v_logits)
        torch.testing.assert_close(s_hidden, vllm.final_norm(v_hidden))
        assert not torch.allclose(s_hidden, v_hidden, atol=1e-2)


def test_a_target_without_an_mtp_layer_is_refused(toy_pair, tmp_path, capsys):
    with pytest.raises(DraftlabError, match="ships no MTP layer"):
        load_mtp(toy_pair.target_dir, MtpServing())
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"input_ids": [5, 6, 7]}) + "\n")
    code = main(["generate", "--target", str(toy_pair.target_dir), "--drafter", "mtp", "--prompts", str(prompts)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "ships no MTP layer" in err[0]


def test_layouts_draftlab_does_not_compute_are_refused_by_name(tmp_path):
    with pytest.raises(DraftlabError, match="MiMo-style"):
        mtp_layout({"num_hidden_layers": 4}, {"model.mtp_layers.0.token_layernorm.weight"}, tmp_path)
    with pytest.raises(DraftlabError, match="ships no MTP layer"):  # a count without the layer's tensors
        mtp_layout({"num_hidden_layers": 4, "num_nextn_predict_layers": 1}, {"model.layers.3.mlp.gate.weight"},
                   tmp_path)


def test_a_folder_named_mtp_here_makes_the_name_ambiguous(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert names_mtp("mtp") and not names_mtp("mtp-drafter") and not names_mtp(None)
    (tmp_path / "mtp").mkdir()
    with pytest.raises(DraftlabError, match="also a folder"):
        names_mtp("mtp")


def _load_reports(load) -> str:
    """What transformers logs while ``load()`` runs, at warning level whatever an earlier test set."""
    import logging

    from transformers.utils import logging as hf_logging

    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger, verbosity = hf_logging.get_logger("transformers"), hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()
    logger.addHandler(handler)
    try:
        load()
    finally:
        logger.removeHandler(handler)
        hf_logging.set_verbosity(verbosity)
    return "\n".join(seen)


def test_loading_the_target_expects_its_mtp_layer_and_reports_the_rest(mtp_toy, tmp_path):
    """transformers expects DeepSeek-V3's MTP layer only at index 61: the toy's (layer 4) printed every head
    tensor as UNEXPECTED on each load. Now those load quietly, a genuinely stray tensor is still reported, and
    the model class's own list is left as it was."""
    import shutil

    from safetensors.torch import save_file
    from transformers import DeepseekV3ForCausalLM

    from draftlab.models.target import TargetRunner

    before = list(DeepseekV3ForCausalLM._keys_to_ignore_on_load_unexpected)
    assert "LOAD REPORT" not in _load_reports(lambda: TargetRunner.load(mtp_toy.target_dir, final_hidden=True))
    stray = tmp_path / "target"
    shutil.copytree(mtp_toy.target_dir, stray)
    save_file({"model.stray.weight": torch.zeros(2)}, stray / "zz-stray.safetensors")
    index = stray / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    doc["weight_map"]["model.stray.weight"] = "zz-stray.safetensors"
    index.write_text(json.dumps(doc))
    reported = _load_reports(lambda: TargetRunner.load(stray, final_hidden=True))
    assert "model.stray.weight" in reported and "model.layers.4." not in reported
    assert DeepseekV3ForCausalLM._keys_to_ignore_on_load_unexpected == before
