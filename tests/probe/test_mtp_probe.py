"""``probe --drafter mtp`` (the target's own MTP head, on the toy DeepSeek-V3 and Qwen3-Next targets)
gives ``generate``'s per-prompt accept lengths, on chains and trees, for either engine's rules; its JSON
names the drafter kind and the head's layer; captured features, which hold no final hidden state, and a
vLLM tree (vLLM drafts with the head as a chain) are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import byte_prompts

from draftlab.cli import main
from draftlab.decode.generate import generate
from draftlab.engines.mtp_head import MtpServing
from draftlab.probe.probe import probe
from draftlab.toy.mtp import LAYERS

TEXTS = ["def __init__(self", "import os\nimport sys\n", "    return self._", "for i in range(len("]
CONFIGS = [(3, 1, 4), (1, 1, 2), (3, 2, 6), (4, 3, 8)]
# SGLang drafts chains and trees with the head, vLLM chains (engines/mtp.py)
RUNS = [("sglang", c) for c in CONFIGS] + [("vllm", c) for c in CONFIGS if c[1] == 1]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    return byte_prompts(tmp_path_factory.mktemp("p"), TEXTS)


@pytest.mark.parametrize(("engine", "cfg"), RUNS, ids=[f"{e}-{'-'.join(map(str, c))}" for e, c in RUNS])
@pytest.mark.parametrize("kind", ["deepseek", "qwen3_next"])
def test_probe_equals_generate(mtp_toy, prompts, kind, engine, cfg):
    steps, k, n = cfg
    folder = mtp_toy.target_dir if kind == "deepseek" else mtp_toy.qwen3_next_dir
    kw = {"steps": steps, "topk": k, "num_draft_tokens": n, "max_new_tokens": 24, "mtp": MtpServing(engine)}
    got = probe(folder, "mtp", prompts, **kw)
    want = generate(folder, "mtp", prompts, **kw)
    assert [r.accept_lengths for r in got.results] == [r.accept_lengths for r in want.results]
    assert got.mean_accept_length > 1.5


def test_the_json_names_the_mtp_head(mtp_toy, prompts, capsys):
    code = main(["probe", "--target", str(mtp_toy.target_dir), "--drafter", "mtp", "--prompts", str(prompts),
                 "--steps", "2", "--topk", "1", "--num-draft-tokens", "3", "--max-new-tokens", "8", "--json"])
    assert code == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert config["drafter_kind"] == "mtp" and config["mtp_layer"] == f"model.layers.{LAYERS}"
    assert config["drafter"] == "mtp" and config["engine"] == "sglang" and config["aux_layers"] is None


def test_captured_features_are_refused(mtp_toy, tmp_path, capsys):
    code = main(["probe", "--target", str(mtp_toy.target_dir), "--drafter", "mtp", "--features", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--drafter mtp" in err[0] and "--prompts" in err[0]


def test_a_vllm_tree_is_refused(mtp_toy, prompts, capsys):
    code = main(["probe", "--target", str(mtp_toy.target_dir), "--drafter", "mtp", "--prompts", str(prompts),
                 "--engine", "vllm", "--steps", "3", "--topk", "2", "--num-draft-tokens", "6"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--topk 2" in err[0] and "chain" in err[0]
