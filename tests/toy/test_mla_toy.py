"""The toy MLA pair: a dense DeepSeek-V3 target with YaRN, and MLA drafters (plain and EAGLE-3.1) that
read back as such, copy the target's RoPE, and agree with it often but not always."""

from __future__ import annotations

import pytest
import torch

from draftlab.checkpoint import DrafterConfig, TargetConfig, open_checkpoint
from draftlab.checkpoint.variants import unsupported
from draftlab.engines import aux_layers
from draftlab.models import Eagle3Drafter, TargetRunner
from draftlab.toy import train
from draftlab.toy.corpus import stdlib_text
from draftlab.toy.mla import AUX_LAYERS, cached_mla_toy


@pytest.fixture(scope="module")
def toy():
    return cached_mla_toy()


def test_target_is_a_dense_deepseek_v3_with_yarn(toy) -> None:
    ckpt = open_checkpoint(toy.target_dir)
    t = TargetConfig.from_dict(ckpt.config)
    assert (t.architecture, t.attention, t.num_experts) == ("DeepseekV3ForCausalLM", "MLA", 4)
    assert ckpt.config["first_k_dense_replace"] == t.num_layers  # every layer's MLP is dense
    assert not any(".experts." in n or ".mlp.gate." in n for n in ckpt.tensors)
    assert t.rope.scaling["rope_type"] == "yarn" and t.rope.scaling["mscale_all_dim"] == 1.0


@pytest.mark.parametrize(("folder", "name"), [("drafter_dir", "eagle3-mla"), ("eagle31_dir", "eagle3.1-mla")])
def test_drafters_read_back_as_mla_with_the_targets_rope(toy, folder, name) -> None:
    path = getattr(toy, folder)
    ckpt = open_checkpoint(path)
    d = DrafterConfig.from_dict(ckpt.config)
    t = TargetConfig.from_dict(open_checkpoint(toy.target_dir).config)
    assert d.architecture == "Eagle3DeepseekV2ForCausalLM" and d.variant.name == name
    assert unsupported(ckpt.config, ckpt.tensors) == []
    assert d.rope == t.rope
    assert aux_layers("sglang", d, t.num_layers, target=t).layers == AUX_LAYERS


@pytest.mark.parametrize("folder", ["drafter_dir", "eagle31_dir"])
def test_drafters_agree_with_the_target_often_but_not_always(toy, folder) -> None:
    target = TargetRunner.load(toy.target_dir, aux_layers=AUX_LAYERS)
    drafter = Eagle3Drafter.load(getattr(toy, folder), target=target)
    tokens = torch.frombuffer(bytearray(stdlib_text("heldout", 20_000)), dtype=torch.uint8).long()
    windows = tokens[: 16 * 64].view(16, 64)
    agreement = train.agreement(drafter, windows, *train.target_features(target, windows, lambda k: None))
    assert 0.3 < agreement < 0.95
