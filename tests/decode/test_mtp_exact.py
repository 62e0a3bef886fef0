"""The target's own MTP head (``--drafter mtp``) on the toy targets (DeepSeek-V3: MLA, MoE, one MTP layer;
Qwen3-Next: gated attention, MoE, ``mtp.*``), exactly: ``generate``'s per-cycle accept lengths equal a
plain greedy speculative loop over SGLang's tree drafted by the independent reference head
(:mod:`mtp_reference`) and verified by the target's uncached HF forward, on a chain and a tree; dropping
either input norm of the head changes what it accepts; the JSON names the drafter kind and the head's
layer. (``probe`` == ``generate``: tests/probe/test_mtp_probe.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from builders import byte_prompts
from mtp_reference import MtpReference
from test_mla_exact import _Reference as TreeReference
from transformers import AutoModelForCausalLM

from draftlab.cli import main
from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.decode.generate import generate
from draftlab.engines.mtp_head import MtpServing
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.models.mtp import load_mtp
from draftlab.toy.mtp import LAYERS

TEXTS = ["def __init__(self", "import os\nimport sys\n", "    return self._", "for i in range(len(",
         "x = [1, 2, 3]\nprint("]
CONFIGS = [(3, 1, 4), (3, 2, 6)]
NEW = 32


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    return byte_prompts(tmp_path_factory.mktemp("p"), TEXTS)


KINDS = ["deepseek", "qwen3_next"]


def _folder(mtp_toy, kind: str) -> Path:
    return mtp_toy.target_dir if kind == "deepseek" else mtp_toy.qwen3_next_dir


@pytest.fixture(scope="module")
def hf_targets(mtp_toy):
    return {kind: AutoModelForCausalLM.from_pretrained(_folder(mtp_toy, kind), dtype=torch.float32).eval()
            for kind in KINDS}


class _Reference(TreeReference):
    """SGLang's tree drafted by :class:`MtpReference`, verified by the target's uncached forward: each draft
    node is the head over the committed rows (row j: token j + 1, the target's final hidden state at j) plus
    the node's ancestors (each: its token, its parent's output)."""

    def __init__(self, target, target_dir: Path, skip: tuple[str, ...] = ()) -> None:
        self.target = target
        self.head = MtpReference(target, target_dir, skip)
        self.d2t = torch.zeros(target.config.vocab_size, dtype=torch.long)  # the head drafts target ids
        self.eos = target.generation_config.eos_token_id

    def _target(self, seq: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [L, V] and the final (post-norm) hidden state [L, H] of a sequence."""
        out = self.target(torch.tensor([seq]), output_hidden_states=True)
        return out.logits[0], out.hidden_states[-1][0]

    def _node(self, seq: list[int], feats: torch.Tensor, path: list[tuple[int, torch.Tensor]]
              ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head(seq[1:] + [tok for tok, _ in path], list(feats[:len(seq) - 1]) + [h for _, h in path])


def _ids(texts: list[str]) -> list[list[int]]:
    return [list(t.encode()) for t in texts]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(map(str, c)) for c in CONFIGS])
@pytest.mark.parametrize("kind", KINDS)
def test_generate_equals_the_reference_loop_per_cycle(mtp_toy, hf_targets, prompts, kind, cfg):
    steps, k, n = cfg
    folder = _folder(mtp_toy, kind)
    got = generate(folder, "mtp", prompts, steps=steps, topk=k, num_draft_tokens=n, max_new_tokens=NEW)
    assert got.config["mtp_style"] == kind
    ref = _Reference(hf_targets[kind], folder)
    want = [ref.accept_lengths(p, steps, k, n, NEW) for p in _ids(TEXTS)]
    assert [r.accept_lengths for r in got.results] == want
    lengths = [a for r in want for a in r]
    assert sum(lengths) / len(lengths) > 2.0 and len(set(lengths)) >= 3  # the head accepts, not always fully


@pytest.mark.parametrize("norm", ["embed_norm", "hidden_norm"])
def test_dropping_an_input_norm_changes_the_accept_lengths(mtp_toy, hf_targets, norm):
    """The decoder with the head's enorm (or hnorm) left out accepts differently; the reference with the same
    norm left out agrees with it, so the norm is what the head computes, not an accident of the toy."""
    flags = exact_spec_flags(3, 1, 4)
    runner, head = load_mtp(mtp_toy.target_dir, MtpServing())
    decoder = SpeculativeDecoder(runner, head, flags)

    def lengths() -> list[list[int]]:
        return [[c.accept_length for c in decoder.stream(p, max_new_tokens=NEW) if c.accept_length is not None]
                for p in _ids(TEXTS[:3])]

    intact = lengths()
    setattr(head, norm, torch.nn.Identity())
    dropped = lengths()
    assert dropped != intact
    skip = ("embed",) if norm == "embed_norm" else ("hidden",)
    assert dropped == [_Reference(hf_targets["deepseek"], mtp_toy.target_dir, skip).accept_lengths(p, 3, 1, 4, NEW)
                       for p in _ids(TEXTS[:3])]


def test_the_json_names_the_mtp_head(mtp_toy, prompts, capsys):
    code = main(["generate", "--target", str(mtp_toy.target_dir), "--drafter", "mtp", "--prompts", str(prompts),
                 "--steps", "2", "--topk", "1", "--num-draft-tokens", "3", "--max-new-tokens", "8", "--json",
                 "--engine", "vllm"])
    assert code == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert config["drafter_kind"] == "mtp" and config["mtp_layer"] == f"model.layers.{LAYERS}"
    assert config["mtp_style"] == "deepseek" and config["mtp_num_layers"] == 1
    assert config["engine"] == "vllm" and config["captured_layers"] is None
