"""Drafters whose decoder layer differs, computed exactly: a sliding-window drafter (W = 8, prompts of 48
tokens) and a Qwen3-architecture drafter (per-head q/k norms, speculators' layout), each a toy drafter
trained with its layer (draftlab.toy.variants).

generate's per-cycle accept lengths equal an independent plain decoder's (tests/decode/variant_reference.py:
the drafter recomputed from scratch every cycle, the window an explicit mask) on every prompt, chain and
tree; probe equals generate; and the same weights without the window (SGLang without
--speculative-draft-window-size) or without the q/k norms accept differently.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from variant_reference import Reference

from draftlab.decode.generate import generate
from draftlab.models import kernels, split_kv
from draftlab.models.pair import deployment_for
from draftlab.probe.probe import probe
from draftlab.toy.corpus import stdlib_text
from draftlab.toy.pair import AUX_LAYERS
from draftlab.toy.variants import WINDOW, cached_variant_drafter

SHORT = [b"def __init__(self", b"import os\nimport sys\n", b"    return self._", b"for i in range(len(",
         b"class Foo:\n    ", b"if __name__ == "]  # within the toy's training length, prompt and output
LONG_BYTES = 48  # six windows
NEW = 32
CONFIGS = [(3, 1, 4), (3, 2, 6)]
CASES = {"sliding-window": WINDOW, "qwen3": None}  # the variant and the window the reference applies


def _prompts(tmp: Path, name: str) -> Path:
    if name == "sliding-window":
        text = stdlib_text("heldout", 20000)
        rows = [text[i * 997:i * 997 + LONG_BYTES] for i in range(5)]
    else:
        rows = SHORT
    path = tmp / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(p)}) + "\n" for p in rows))
    return path


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, toy_pair, tmp_path_factory) -> tuple[str, Path, Path]:
    name = request.param
    return name, cached_variant_drafter(toy_pair, name), _prompts(tmp_path_factory.mktemp(name), name)


def _generate(toy_pair, drafter: Path, prompts: Path, cfg: tuple[int, int, int], engine: str = "vllm",
              batch_size: int = 1, **deploy):
    steps, topk, n = cfg
    return generate(toy_pair.target_dir, drafter, prompts, steps=steps, topk=topk, num_draft_tokens=n,
                    max_new_tokens=NEW, ignore_eos=True, batch_size=batch_size,
                    deployment=deployment_for(toy_pair.target_dir, drafter, engine, **deploy))


def _prompt_ids(prompts: Path) -> list[list[int]]:
    return [json.loads(line)["input_ids"] for line in prompts.read_text().splitlines()]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(map(str, c)) for c in CONFIGS])
def test_generate_equals_an_independent_decoder_and_probe_equals_generate(toy_pair, case, cfg):
    name, drafter, prompts = case
    got = _generate(toy_pair, drafter, prompts, cfg)
    reference = Reference(toy_pair.target_dir, drafter, AUX_LAYERS, window=CASES[name])
    expected = [reference.accept_lengths(p, *cfg, NEW) for p in _prompt_ids(prompts)]
    assert [r.accept_lengths for r in got.results] == expected
    assert got.mean_accept_length > 1.5  # drafts are accepted: the equality means something
    probed = probe(toy_pair.target_dir, drafter, prompts, steps=cfg[0], topk=cfg[1], num_draft_tokens=cfg[2],
                   max_new_tokens=NEW, batch_size=3, deployment=deployment_for(toy_pair.target_dir, drafter, "vllm"))
    assert [r.accept_lengths for r in probed.results] == [r.accept_lengths for r in got.results]


def test_the_same_weights_without_the_window_accept_differently(toy_pair, tmp_path):
    """SGLang reads no window from the config: without its server flag it runs the drafter on full attention
    (other accept lengths, past the toy's training length far fewer); with --speculative-draft-window-size 8
    it runs what vLLM runs. The batched decoder's cache computes the window as the batch-1 one does."""
    drafter = cached_variant_drafter(toy_pair, "sliding-window")
    prompts = _prompts(tmp_path, "sliding-window")
    served = _generate(toy_pair, drafter, prompts, (3, 1, 4))
    full = _generate(toy_pair, drafter, prompts, (3, 1, 4), "sglang")
    flagged = _generate(toy_pair, drafter, prompts, (3, 1, 4), "sglang", draft_window=WINDOW)
    batched = _generate(toy_pair, drafter, prompts, (3, 1, 4), batch_size=3)
    assert [r.accept_lengths for r in full.results] != [r.accept_lengths for r in served.results]
    assert full.mean_accept_length < served.mean_accept_length
    assert [r.accept_lengths for r in flagged.results] == [r.accept_lengths for r in served.results]
    assert [r.accept_lengths for r in batched.results] == [r.accept_lengths for r in served.results]


@pytest.mark.skipif(not split_kv.available(), reason="needs Triton (the test extras install it)")
def test_the_split_kv_kernels_read_the_window_from_the_mask(toy_pair, tmp_path, monkeypatch):
    """DRAFTLAB_ATTENTION=split-kv: the batched decoder's drafter steps (BatchKV, 16-wide heads) go through the
    kernels, which take the windowed mask per token (Triton's interpreter on the CPU): vLLM's accept lengths."""
    drafter = cached_variant_drafter(toy_pair, "sliding-window")
    prompts = tmp_path / "two.jsonl"  # the interpreter is slow: two of the prompts
    prompts.write_text("".join(_prompts(tmp_path, "sliding-window").read_text().splitlines(True)[:2]))
    served = _generate(toy_pair, drafter, prompts, (3, 1, 4))
    calls = []
    attention = split_kv.attention
    monkeypatch.setattr(split_kv, "attention", lambda *a, **k: calls.append(1) or attention(*a, **k))
    monkeypatch.setenv(kernels.ATTENTION_ENV, "split-kv")
    kernels.split_kv_chosen.cache_clear()
    try:
        through = _generate(toy_pair, drafter, prompts, (3, 1, 4), batch_size=2)
    finally:
        kernels.split_kv_chosen.cache_clear()
    assert calls and [r.accept_lengths for r in through.results] == [r.accept_lengths for r in served.results]


def test_the_same_weights_without_the_qk_norms_accept_differently(toy_pair, tmp_path):
    drafter = cached_variant_drafter(toy_pair, "qwen3")
    prompts = _prompts(tmp_path, "qwen3")
    llama = tmp_path / "llama"
    llama.mkdir()
    config = json.loads((drafter / "config.json").read_text())
    config["transformer_layer_config"]["model_type"] = "llama"
    (llama / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(drafter / "model.safetensors"))
    save_file({k: v for k, v in tensors.items() if "_norm." not in k or "self_attn" not in k},
              str(llama / "model.safetensors"))
    served = _generate(toy_pair, drafter, prompts, (3, 1, 4))
    without = _generate(toy_pair, llama, prompts, (3, 1, 4))
    assert [r.accept_lengths for r in without.results] != [r.accept_lengths for r in served.results]
