"""Today's drafter variants computed exactly: norm_before_fc, EAGLE-3.1 (fc_norm + norm_output) and
speculators' v0.7 defaults (norm_before_fc + norm_output), each a toy drafter trained with its variant.

generate's per-cycle accept lengths equal an independent plain decoder's (tests/decode/variant_reference.py)
on every prompt, chain and tree; probe equals generate; and the same drafter run with a flag dropped
(the flag and its tensors gone, as an engine that does not read the flag runs it) accepts differently.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from variant_reference import Reference

from draftlab.decode.generate import generate
from draftlab.probe.probe import probe
from draftlab.toy.pair import AUX_LAYERS
from draftlab.toy.variants import VARIANT_FLAGS, cached_variant_drafter

PROMPTS = [b"def __init__(self", b"import os\nimport sys\n", b"    return self._", b"for i in range(len(",
           b"class Foo:\n    ", b"if __name__ == "]
NEW = 40
CONFIGS = [(3, 1, 4), (3, 2, 6)]
TENSORS_OF = {"norm_before_fc": lambda n: n == "input_norm.weight", "fc_norm": lambda n: n.startswith("fc_norm."),
              "norm_output": lambda n: False}


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(p)}) + "\n" for p in PROMPTS))
    return path


@pytest.fixture(scope="module", params=sorted(VARIANT_FLAGS))
def variant(request, toy_pair) -> tuple[str, Path]:
    return request.param, cached_variant_drafter(toy_pair, request.param)


def _generate(toy_pair, drafter: Path, prompts: Path, cfg: tuple[int, int, int]):
    steps, topk, n = cfg
    return generate(toy_pair.target_dir, drafter, prompts, steps=steps, topk=topk, num_draft_tokens=n,
                    max_new_tokens=NEW, ignore_eos=True)


def dropped(drafter: Path, flag: str, out: Path) -> Path:
    """A copy of ``drafter`` without ``flag`` and the tensors only it reads."""
    out.mkdir()
    config = json.loads((drafter / "config.json").read_text())
    del config[flag]
    (out / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(drafter / "model.safetensors"))
    save_file({k: v for k, v in tensors.items() if not TENSORS_OF[flag](k)}, str(out / "model.safetensors"))
    return out


@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(map(str, c)) for c in CONFIGS])
def test_generate_equals_an_independent_decoder_and_probe_equals_generate(toy_pair, prompts, variant, cfg):
    name, drafter = variant
    got = _generate(toy_pair, drafter, prompts, cfg)
    reference = Reference(toy_pair.target_dir, drafter, AUX_LAYERS)
    expected = [reference.accept_lengths(list(p), *cfg, NEW) for p in PROMPTS]
    assert [r.accept_lengths for r in got.results] == expected
    assert got.mean_accept_length > 1.5  # drafts are accepted: the equality means something
    probed = probe(toy_pair.target_dir, drafter, prompts, steps=cfg[0], topk=cfg[1], num_draft_tokens=cfg[2],
                   max_new_tokens=NEW, batch_size=3)
    assert [r.accept_lengths for r in probed.results] == [r.accept_lengths for r in got.results]


@pytest.mark.parametrize("flag", ["norm_before_fc", "fc_norm", "norm_output"])
def test_dropping_a_flag_changes_the_accept_lengths(toy_pair, prompts, tmp_path, flag):
    name = next(n for n, flags in sorted(VARIANT_FLAGS.items()) if flag in flags)
    drafter = cached_variant_drafter(toy_pair, name)
    served = _generate(toy_pair, drafter, prompts, (3, 1, 4))
    without = _generate(toy_pair, dropped(drafter, flag, tmp_path / "dropped"), prompts, (3, 1, 4))
    assert [r.accept_lengths for r in without.results] != [r.accept_lengths for r in served.results]
