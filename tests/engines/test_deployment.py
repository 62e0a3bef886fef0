"""One resolved deployment: the release's captured layers, runner and served window for a pair, and the
version the user asked for beside the release whose rules applied."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from draftlab.checkpoint.configs import DrafterConfig, TargetConfig
from draftlab.compat import check_pair
from draftlab.engines.deployment import Deployment

sys.path.insert(0, str(Path(__file__).parents[1]))
from builders import make_pair, tiny_target_config  # noqa: E402

KIMI = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61,
        "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 256, "n_routed_experts": 8, "kv_lora_rank": 16}


def _drafter(ids: list[int], **layer) -> DrafterConfig:
    return DrafterConfig.from_dict({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64,
                                    "num_attention_heads": 4, "vocab_size": 256, **layer,
                                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}})


@pytest.mark.parametrize(("engine", "version", "ids", "captured", "runner"), [
    ("vllm", "0.22.0", [3, 30, 57], [2, 29, 56], "V1"),  # V1 reads the nested ids verbatim
    ("vllm", "0.34.0", [3, 30, 57], [1, 29, 57], "MRV2"),  # MRV2 never reads them: the default
    ("sglang", "0.5.12", [2, 30, 58], [2, 30, 58], None),  # +1 to every id
    ("sglang", "0.5.13", [2, 30, 58], [1, 29, 57], None),  # DeepSeek/Kimi ids not opening with 1: verbatim
])
def test_the_release_decides_the_captured_layers(engine, version, ids, captured, runner):
    deployed = Deployment.resolve(engine, version, _drafter(ids), TargetConfig.from_dict(KIMI))
    assert deployed.aux.layers == captured and deployed.runner == runner
    assert deployed.describe()["captured_layers"] == captured and deployed.version == version


def test_the_window_is_served_by_vllm_and_by_sglang_only_with_its_flag():
    windowed = _drafter([2, 30, 58], layer_types=["sliding_attention"], sliding_window=8)
    target = TargetConfig.from_dict(KIMI)
    assert Deployment.resolve("vllm", None, windowed, target).windows == (8,)
    assert Deployment.resolve("sglang", None, windowed, target).windows == (None,)
    assert Deployment.resolve("sglang", None, windowed, target, draft_window=8).windows == (8,)


def test_check_names_the_version_asked_and_the_release_whose_rules_applied(tmp_path):
    drafter, target = make_pair(tmp_path, tiny_target_config("llama"))
    result = check_pair(drafter, target, engine="sglang", engine_version="0.5.13.post1")
    assert result.engine_version == "0.5.13" == result.deployment["engine_version"]
    assert result.deployment["engine_version_asked"] == "0.5.13.post1"


def test_inspect_names_the_captured_layers_of_the_release_asked(tmp_path):
    from draftlab.compat.summary import inspect_checkpoint

    drafter, target = make_pair(tmp_path, tiny_target_config("llama"))
    for engine, version in (("sglang", "0.5.12"), ("vllm", "0.22.0"), ("vllm", "0.34.0")):
        summary = inspect_checkpoint(drafter, engine, target=target, engine_version=version)
        checked = check_pair(drafter, target, engine=engine, engine_version=version)
        assert summary.captured_layers == summary.aux_layers == checked.deployment["captured_layers"]
        assert summary.engine_version == version
