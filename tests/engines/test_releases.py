"""The per-release tables (reference/drafter-variants.md): what each release reads, aux ids both ways, launch."""

from __future__ import annotations

import json

import pytest
from builders import make_pair, with_tensors

from draftlab.checkpoint.configs import TargetConfig
from draftlab.cli import main
from draftlab.engines import aux_layers, capturable, written_aux_ids
from draftlab.engines.releases import RELEASES, VERSIONS, first_mla_release, first_release, release, version_key
from draftlab.errors import DraftlabError


def test_versions_are_ordered_and_the_newest_is_the_default():
    for versions in VERSIONS.values():
        assert [version_key(v) for v in versions] == sorted(version_key(v) for v in versions)
    assert release("sglang").version == "0.5.23" and release("vllm").version == "0.34.0"
    assert version_key("0.5.12") < version_key("0.5.12.post1") < version_key("0.5.13")
    # any release resolves to the newest known at or below it (test_release_resolution); older is refused
    with pytest.raises(DraftlabError, match="0.5.10 to 0.5.23"):
        release("sglang", "0.5.9")


@pytest.mark.parametrize(("engine", "flag", "kind", "layout", "first"), [
    ("sglang", "norm_before_fc", "llama", "specforge", "0.5.17"),  # PR #32334
    ("sglang", "fc_norm", "llama", "specforge", "0.5.12"),  # PR #24663
    ("sglang", "fc_norm", "mla", "specforge", "0.5.13"),  # PR #26506
    ("sglang", "norm_before_fc", "mla", "specforge", None),  # no input_norm in kimi_k25_eagle3 up to 0.5.23
    ("vllm", "norm_before_fc", "llama", "specforge", "0.18.0"),  # top level (#36545); nested from 0.22.0
    ("vllm", "norm_before_fc", "llama", "speculators", "0.19.0"),  # #38111
    ("vllm", "fc_norm", "llama", "speculators", "0.25.0"),  # #46488
    ("vllm", "norm_output", "llama", "specforge", "0.22.0"),  # #42764
    ("vllm", "norm_before_fc", "mla", "specforge", None),  # deepseek_eagle3 has none up to 0.34.0
])
def test_first_release_reading_each_flag(engine, flag, kind, layout, first):
    assert first_release(engine, flag, kind, layout) == first


def test_where_each_release_reads_norm_before_fc():
    assert release("vllm", "0.21.0").places("norm_before_fc", "llama", "specforge") == ("norm_before_fc",)
    assert release("vllm", "0.22.0").places("norm_before_fc", "llama", "specforge") == \
        ("eagle_config.norm_before_fc", "norm_before_fc")
    assert release("sglang", "0.5.23").places("fc_norm", "llama", "specforge") == ("fc_norm", "use_aux_norm")
    assert first_mla_release("sglang") == "0.5.12" and first_mla_release("vllm") == "0.18.0"
    assert not release("vllm", "0.22.0").mla_fc_norm_applied and release("vllm", "0.23.0").mla_fc_norm_applied


def _target(model_type: str, layers: int, moe: bool = False) -> TargetConfig:
    config = {"model_type": model_type, "num_hidden_layers": layers, "hidden_size": 64, "vocab_size": 512,
              "num_attention_heads": 4, **({"n_routed_experts": 8} if moe else {})}
    return TargetConfig.from_dict(config)


CANONICAL = [[1, 29, 57], [2, 30, 58], [5, 20, 60], [0, 30, 59]]


@pytest.mark.parametrize("family", ["llama", "deepseek_v3", "gpt_oss", "qwen3"])
def test_written_ids_are_read_back_by_every_release(family):
    """Whatever a fix writes for a release, that release captures exactly the intended layers."""
    from draftlab.checkpoint.configs import DrafterConfig

    target = _target(family, 61)
    for (engine, version) in RELEASES:
        ok = capturable(61, engine, target=target, version=version)
        for layers in CANONICAL:
            if any(k not in ok for k in layers):
                continue
            try:
                ids = written_aux_ids(engine, layers, target=target, version=version)
            except DraftlabError:
                assert family == "deepseek_v3" and layers[0] == 0 and version_key(version) >= version_key("0.5.13")
                continue
            field = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}} if engine == "sglang" else \
                {"eagle_aux_hidden_state_layer_ids": ids}
            drafter = DrafterConfig.from_dict({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64,
                                               "num_attention_heads": 4, "vocab_size": 512, **field})
            read = aux_layers(engine, drafter, 61, target=target, version=version)
            assert read.layers == layers, (engine, version, family, layers, ids, read.rule)


def test_final_boundary_capturable_only_where_captured():
    gpt_oss, deepseek, llama = _target("gpt_oss", 36), _target("deepseek_v3", 61), _target("llama", 32)
    assert capturable(36, "sglang", target=gpt_oss, version="0.5.17").stop == 36
    assert capturable(36, "sglang", target=gpt_oss, version="0.5.16").stop == 35
    assert capturable(61, "vllm", target=deepseek, version="0.25.0").stop == 61
    assert capturable(61, "vllm", target=deepseek, version="0.24.0").stop == 60
    assert capturable(32, "vllm", target=llama, version="0.34.0").stop == 32
    # llama.py's EagleModelMixin appends every layer's output from 0.18.0 (engine-releases-2026-12.md)
    assert capturable(32, "vllm", target=llama, version="0.18.0").stop == 32
    assert capturable(32, "vllm", target=llama, version="0.17.1").stop == 31


def test_default_runner_per_release():
    assert release("vllm", "0.21.0").default_runner(False) == "V1"
    assert release("vllm", "0.22.0").default_runner(True) == "V1"
    assert release("vllm", "0.22.0").default_runner(False) is None  # the listed archs are not in the note
    assert release("vllm", "0.25.0").default_runner(False) == "MRV2"
    assert release("vllm", "0.33.0").default_runner(True) == "MRV2"
    assert release("vllm", "0.34.0").runners == ("MRV2",)


def test_launch_checks_with_the_release_given(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"], norm_before_fc=True)
    with_tensors(drafter, {"input_norm.weight": ("BF16", (192,))})
    base = ["launch", "sglang", "--target", str(target), "--drafter", str(drafter), "--steps", "3", "--topk", "1",
            "--num-draft-tokens", "4", "--dry-run", "--json"]
    assert main(base + ["--engine-version", "0.5.16"]) == 2
    err = capsys.readouterr().err
    assert "variant-unread" in err and "input_norm.weight" in err and "0.5.16" in err
    assert main(base) == 0
    assert any("0.5.23" in note for note in json.loads(capsys.readouterr().out)["notes"])
    # newer than the newest known: the newest rules, with one warning; older than the oldest: refused
    assert main(base + ["--engine-version", "9.9.9", "--skip-check"]) == 0
    assert "SGLang 9.9.9 is newer" in capsys.readouterr().err
    assert main(base + ["--engine-version", "0.5.9", "--skip-check"]) == 2
    assert "0.5.10 to 0.5.23" in capsys.readouterr().err
