"""Which releases serve a target's own MTP layers, and with which flags (engines/mtp.py): per engine, release and
target family, from headers-only targets (tests/mtp_targets.py); each rule names its engine file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mtp_targets import mtp_target

from draftlab.compat.mtp import check_mtp
from draftlab.compat.summary import inspect_checkpoint
from draftlab.engines import mtp as mtp_rules
from draftlab.engines.launch import LaunchRequest, engine_command
from draftlab.engines.releases import VERSIONS
from draftlab.errors import DraftlabError

# style -> (SGLang draft class, vLLM MTP model_type, SGLang fills --speculative-draft-model-path in)
SERVED = {
    "deepseek": ("DeepseekV3ForCausalLMNextN", "deepseek_mtp", True),
    "glm": ("Glm4MoeForCausalLMNextN", "glm4_moe_mtp", True),
    "qwen3_next": ("Qwen3NextForCausalLMMTP", "qwen3_next_mtp", False),
    "qwen3_5": ("Qwen3_5ForCausalLMMTP", "qwen3_5_mtp", False),
    "mimo": ("MiMoMTP", "mimo_mtp", False),
}
RELEASES = [(engine, version) for engine in ("sglang", "vllm") for version in VERSIONS[engine]]


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.fixture(scope="module")
def targets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mtp-targets")
    made = {style: mtp_target(root / style, style) for style in (*SERVED, "llama")}
    made["deepseek-2"] = mtp_target(root / "deepseek-2", "deepseek", count=2, stored=2)
    made["deepseek-no-tensors"] = mtp_target(root / "deepseek-no-tensors", "deepseek", stored=0)
    made["qwen3_5-no-count"] = mtp_target(root / "qwen3_5-no-count", "qwen3_5", count=None)
    made["qwen3_next-no-count"] = mtp_target(root / "qwen3_next-no-count", "qwen3_next", count=None)
    return made


@pytest.mark.parametrize("engine,version", RELEASES)
def test_every_known_release_serves_every_family_with_its_class(targets, engine, version):
    for style, (sglang_class, vllm_type, _) in SERVED.items():
        result = check_mtp(targets[style], engine, version)
        assert result.ok, (style, result.findings)
        (served,) = [f for f in result.findings if f.code == "mtp-served"]
        assert (sglang_class if engine == "sglang" else vllm_type) in served.message
        assert re.search(r"models/\w+\.py", served.message), served.message  # the engine file it comes from
        assert ("trees" in served.message) == (engine == "sglang")
    refused = check_mtp(targets["llama"], engine, version)
    assert not refused.ok and [f.code for f in refused.findings] == ["mtp-unserved"]


def test_every_family_names_its_engine_files_and_the_docstring_states_them():
    doc = mtp_rules.__doc__
    for family in mtp_rules.FAMILIES:
        for file in (family.sglang_file, family.vllm_file):
            assert re.fullmatch(r"models/\w+\.py", file), file
        assert family.sglang_class in doc and family.vllm_model_type in doc, family.name
    assert "server_args.py" in doc and "config/speculative.py" in doc


def test_the_layer_count_each_engine_reads(targets):
    # vLLM's qwen3_5_mtp reads n_predict from mtp_num_hidden_layers: without it, no MTP layer is built
    no_count = check_mtp(targets["qwen3_5-no-count"], "vllm")
    assert [f.code for f in no_count.findings] == ["mtp-unserved"] and "mtp_num_hidden_layers" in no_count.findings[0].message
    # SGLang's qwen3_next_mtp.py sets num_nextn_predict_layers = 1 itself; vLLM reads it
    assert check_mtp(targets["qwen3_next-no-count"], "sglang").ok
    assert not check_mtp(targets["qwen3_next-no-count"], "vllm").ok
    # SGLang's deepseek_nextn.py asserts exactly one layer; vLLM serves two, drafting with the first
    two_sglang = check_mtp(targets["deepseek-2"], "sglang")
    assert not two_sglang.ok and "asserts exactly 1" in two_sglang.findings[0].message
    two_vllm = check_mtp(targets["deepseek-2"], "vllm")
    assert two_vllm.ok and [f.code for f in two_vllm.findings] == ["mtp-served", "mtp-layers"]
    missing = check_mtp(targets["deepseek-no-tensors"], "sglang")
    assert [f.code for f in missing.findings] == ["mtp-missing"]


def test_inspect_shows_the_mtp_layers(targets):
    deepseek = inspect_checkpoint(targets["deepseek-2"]).mtp
    assert deepseek["layout"] == "deepseek" and deepseek["prefix"] == "model.layers.8."
    assert deepseek["num_layers"] == deepseek["stored_layers"] == 2 and deepseek["num_parameters"] > 0
    qwen = inspect_checkpoint(targets["qwen3_5"]).mtp
    assert (qwen["prefix"], qwen["count_key"]) == ("mtp.", "mtp_num_hidden_layers")
    assert inspect_checkpoint(targets["mimo"]).mtp["prefix"] == "model.mtp_layers.0."
    assert inspect_checkpoint(targets["llama"]).mtp is None


@pytest.mark.parametrize("style", sorted(SERVED))
def test_sglang_launch_flags(targets, style):
    target = str(targets[style])
    arch = json.loads((targets[style] / "config.json").read_text())["architectures"][0]
    cmd = engine_command(LaunchRequest("sglang", target, "mtp", 2, 4, 6, target_architecture=arch))
    assert _flag(cmd.argv, "--speculative-algorithm") == "NEXTN"
    # server_args.py fills the draft path in for DeepSeek-V3/V3.2 and GLM-4.5+ only
    assert _flag(cmd.argv, "--speculative-draft-model-path") == (None if SERVED[style][2] else target)
    assert [_flag(cmd.argv, f"--speculative-{f}") for f in ("num-steps", "eagle-topk", "num-draft-tokens")] == \
        ["2", "4", "6"]  # a tree: SGLang's EAGLE worker drafts MTP trees too
    assert SGLANG_WINDOW not in cmd.argv


SGLANG_WINDOW = "--speculative-draft-window-size"


def test_vllm_launch_flags(targets):
    cmd = engine_command(LaunchRequest("vllm", str(targets["qwen3_next"]), "mtp", steps=3))
    assert json.loads(_flag(cmd.argv, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": 3}
    with pytest.raises(DraftlabError, match="topk"):  # a chain only
        engine_command(LaunchRequest("vllm", str(targets["qwen3_next"]), "mtp", steps=3, topk=2))
    # two MTP layers: num_speculative_tokens above 2 must be a multiple of 2 (config/speculative.py)
    with pytest.raises(DraftlabError, match="multiple"):
        engine_command(LaunchRequest("vllm", str(targets["deepseek-2"]), "mtp", steps=3))
    assert json.loads(_flag(engine_command(LaunchRequest("vllm", str(targets["deepseek-2"]), "mtp", steps=4)).argv,
                            "--speculative-config"))["num_speculative_tokens"] == 4
    with pytest.raises(DraftlabError, match="reference server"):
        engine_command(LaunchRequest("draftlab", str(targets["deepseek"]), "mtp", steps=3, topk=1,
                                     num_draft_tokens=4))


def test_qwen35_mtp_is_served_where_sglang_serves_no_eagle3(targets):
    # releases.py: SGLang serves EAGLE-3 on Qwen3.5/3.6 targets from 0.5.22; its MTP class before that too
    before = check_mtp(targets["qwen3_5"], "sglang", "0.5.21")
    assert before.ok and "serves no EAGLE-3 drafter" in before.findings[0].message
    assert "EAGLE-3" not in check_mtp(targets["qwen3_5"], "sglang", "0.5.22").findings[0].message
