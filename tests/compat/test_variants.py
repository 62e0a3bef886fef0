"""check per engine release: the drafter variants (norm_before_fc, fc_norm, norm_output, MLA) and aux-id rules.

Facts from reference/drafter-variants.md; each case is checked on a release that reads the variant and one
that does not, on the same folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import DROP, SEEN_AUX, as_speculators, k2_mla_pair, make_pair, with_tensors

from draftlab.cli import main
from draftlab.compat import check_pair, fix_pair

H = 64  # the tiny targets' hidden size


def findings(drafter: Path, target: Path, engine: str, version: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in check_pair(drafter, target, engine, version).findings:
        out.setdefault(f.code, []).append(f)
    return out


def problems(drafter: Path, target: Path, engine: str, version: str) -> set[str]:
    """Codes of the errors and warnings (info notes left out)."""
    return {c for c, fs in findings(drafter, target, engine, version).items() if fs[0].severity != "info"}


@pytest.fixture
def norm_before_fc(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], norm_before_fc=True)
    return with_tensors(drafter, {"input_norm.weight": ("BF16", (3 * H,))}), target


def test_norm_before_fc_clean_where_read_error_naming_the_dropped_tensor_where_not(norm_before_fc, capsys):
    drafter, target = norm_before_fc
    assert problems(drafter, target, "sglang", "0.5.23") == set()
    assert problems(drafter, target, "sglang", "0.5.17") == set()  # first release that reads it (#32334)
    [error] = findings(drafter, target, "sglang", "0.5.16")["variant-unread"]
    assert error.severity == "error" and error.field == "input_norm.weight"
    assert "input_norm.weight is dropped silently" in error.message and "SGLang 0.5.16" in error.message
    assert ">= 0.5.17" in error.fix and not error.fixable
    assert main(["check", str(drafter), "-t", str(target), "--engine-version", "0.5.16", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine_version"] == "0.5.16" and not doc["ok"]
    assert main(["check", str(drafter), "-t", str(target), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine_version"] == "0.5.23"  # the newest known by default


def test_fc_norm_sglang_0_5_11_error_0_5_12_clean(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], fc_norm=True)
    with_tensors(drafter, {f"fc_norm.{i}.weight": ("BF16", (H,)) for i in range(3)})
    [error] = findings(drafter, target, "sglang", "0.5.11")["variant-unread"]
    assert error.field == "fc_norm.0.weight" and "fc_norm.0.weight, fc_norm.1.weight, fc_norm.2.weight are dropped" \
        in error.message
    assert problems(drafter, target, "sglang", "0.5.12") == set()
    assert problems(drafter, target, "vllm", "0.21.0") == {"variant-unread"}  # vLLM from 0.22.0 (#42764)
    assert problems(drafter, target, "vllm", "0.22.0") == set()


def test_speculators_layout_fc_norm_vllm_0_24_error_0_25_clean(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], layer_prefix="layers.0.")
    with_tensors(drafter, {f"fc_norm.{i}.weight": ("BF16", (H,)) for i in range(3)})
    as_speculators(drafter, fc_norm=True)
    [error] = findings(drafter, target, "vllm", "0.24.0")["variant-unread"]
    assert "speculators layout" in error.message and ">= 0.25.0" in error.fix
    assert "specforge layout" in error.fix  # vLLM 0.22+ reads it from the flat config
    assert problems(drafter, target, "vllm", "0.25.0") == set()


def test_flag_read_elsewhere_is_fixed_where_that_release_reads_it(tmp_path, target_configs):
    # vLLM 0.18-0.21 read norm_before_fc at the top level only; SGLang/vLLM 0.22+ read eagle_config first.
    drafter, target = make_pair(tmp_path, target_configs["llama"],
                                eagle_config={"eagle_aux_hidden_state_layer_ids": SEEN_AUX, "norm_before_fc": True})
    with_tensors(drafter, {"input_norm.weight": ("BF16", (3 * H,))})
    assert problems(drafter, target, "vllm", "0.22.0") == set()
    [error] = findings(drafter, target, "vllm", "0.21.0")["variant-misplaced"]
    assert error.fixable and error.field == "eagle_config.norm_before_fc"
    fixed = fix_pair(drafter, target, drafter.parent / "fixed", "vllm", engine_version="0.21.0")
    config = json.loads((fixed.out / "config.json").read_text())
    assert config["norm_before_fc"] is True and config["eagle_config"]["norm_before_fc"] is True
    assert fixed.after.ok and fixed.after.engine_version == "0.21.0" and not fixed.renamed


def test_norm_output_meanings(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], norm_output=True)
    [warning] = findings(drafter, target, "sglang", "0.5.23")["norm-output-meaning"]
    assert warning.severity == "warning" and "PR #879" in warning.message and "norm(out)" in warning.message
    assert findings(drafter, target, "sglang", "0.5.11")["norm-output-unread"][0].severity == "warning"
    spec = as_speculators(make_pair(tmp_path / "s", target_configs["llama"], layer_prefix="layers.0.")[0],
                          norm_output=True)
    [error] = findings(spec, target, "vllm", "0.24.0")["norm-output-unread"]
    assert error.severity == "error" and "pre-norm output" in error.message
    assert problems(spec, target, "vllm", "0.25.0") == set()


def test_moe_drafter_and_unknown_flag_are_errors(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], use_fancy_norm=True)
    with_tensors(drafter, {"midlayer.mlp.experts.0.gate_proj.weight": ("BF16", (32, H))})
    found = findings(drafter, target, "sglang", "0.5.23")
    assert found["moe-drafter"][0].severity == "error" and "MoE" in found["moe-drafter"][0].message
    assert found["unknown-key"][0].field == "use_fancy_norm" and found["unknown-key"][0].severity == "error"


def test_tensors_without_flag_and_flag_without_tensors(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    config = json.loads((drafter / "config.json").read_text())
    (drafter / "config.json").write_text(json.dumps({**config, "fc_norm": True}))  # its tensors were never saved
    with_tensors(drafter, {"input_norm.weight": ("BF16", (3 * H,))})
    found = findings(drafter, target, "sglang", "0.5.23")
    assert found["variant-no-flag"][0].field == "input_norm.weight"
    assert found["variant-no-tensors"][0].field == "fc_norm"
    assert "weight-names" not in found  # the variant rules speak for these tensors, never a rename


def test_fc_width_from_vllm_llama_eagle3_ignores_top_level_count(tmp_path, target_configs):
    four = [1, 2, 4, 5]
    drafter, target = make_pair(tmp_path, target_configs["llama"], eagle_config=DROP,
                                eagle_aux_hidden_state_layer_ids=[k + 1 for k in four])
    with_tensors(drafter, {"fc.weight": ("BF16", (H, 4 * H))})
    assert problems(drafter, target, "vllm", "0.21.0") == set()  # sized otherwise: not in the note
    [error] = findings(drafter, target, "vllm", "0.34.0")["fc-aux-count"]
    assert "builds fc for 3 aux features" in error.message and error.fixable
    fixed = fix_pair(drafter, target, tmp_path / "fixed", "vllm")
    assert json.loads((fixed.out / "config.json").read_text())["num_aux_hidden_states"] == 4
    assert fixed.after.ok and fixed.after.aux_layers == four


def test_vllm_runners_read_nested_ids_differently(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], eagle_aux_hidden_state_layer_ids=DROP)
    # V1 runner 0.22-0.33: nested ids verbatim (off by one); 0.25-0.27 put a dense target on MRV2: default.
    v25 = findings(drafter, target, "vllm", "0.25.0")
    assert v25["aux-runner"][0].severity == "warning" and v25["aux-runner"][0].fixable
    assert check_pair(drafter, target, "vllm", "0.25.0").aux_layers == [1, 3, 4]
    assert check_pair(drafter, target, "vllm", "0.23.0").aux_layers == [k - 1 for k in SEEN_AUX]  # V1 assumed
    assert "aux-runner" not in findings(drafter, target, "vllm", "0.34.0")  # only MRV2: never nested
    assert "aux-runner" not in findings(drafter, target, "vllm", "0.21.0")  # only V1, top level only
    fixed = fix_pair(drafter, target, tmp_path / "fixed", "vllm", engine_version="0.25.0")
    assert fixed.after.ok and "aux-runner" not in {f.code for f in fixed.after.findings}
    assert json.loads((fixed.out / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]


def test_unknown_engine_version_is_one_line_naming_the_known(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    # 0.28.0 is a release (engine-releases-2026-12.md): only one older than the oldest known is refused
    assert main(["check", str(drafter), "-t", str(target), "-e", "vllm", "--engine-version", "0.16.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "0.16.0" in err[0] and "0.17.1 to 0.34.0" in err[0]


# --- MLA drafters on a Kimi-K2-shaped target (real sizes over sparse files) --------------------------------

@pytest.fixture(scope="module")
def k2(tmp_path_factory):
    return k2_mla_pair(tmp_path_factory.mktemp("k2"))


@pytest.mark.parametrize(("engine", "version"), [("sglang", "0.5.23"), ("vllm", "0.34.0")])
def test_mla_drafter_is_clean_on_the_newest_releases(k2, engine, version):
    drafter, target = k2
    result = check_pair(drafter, target, engine, version)
    assert result.ok and problems(drafter, target, engine, version) == set(), result.findings
    assert result.aux_layers == [1, 29, 57]  # [2, 30, 58] as inputs of layers, both engines


def test_mla_fix_keeps_the_architecture(k2, tmp_path):
    drafter, target = k2
    short = _variant(drafter, tmp_path, "short", max_position_embeddings=4096)
    fixed = fix_pair(short, target, tmp_path / "fixed", "sglang")
    assert [f.code for f in fixed.fixed] == ["context-too-short"] and fixed.after.ok
    assert json.loads((fixed.out / "config.json").read_text())["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]


def _variant(drafter: Path, tmp: Path, name: str, extra: dict | None = None, **fields) -> Path:
    """``drafter`` with config ``fields`` changed (DROP removes) and ``extra`` tensors, in a new folder."""
    from draftlab.checkpoint import open_checkpoint
    from draftlab.checkpoint.synth import write_safetensors

    out = tmp / name
    out.mkdir()
    config = {**json.loads((drafter / "config.json").read_text()), **fields}
    (out / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not DROP}))
    specs = {n: (i.dtype, tuple(i.shape)) for n, i in open_checkpoint(drafter).tensors.items()}
    write_safetensors(out / "model.safetensors", {**specs, **(extra or {})}, sparse=True)
    return out


def test_mla_architecture_fix_writes_the_mla_class_never_llama(k2, tmp_path):
    drafter, target = k2
    specforge_name = _variant(drafter, tmp_path, "sf", architectures=["DeepseekV3ForCausalLMEagle3"])
    [finding] = findings(specforge_name, target, "sglang", "0.5.23")["architecture-unknown"]
    assert finding.fixable and "Eagle3DeepseekV2ForCausalLM" in finding.fix
    fixed = fix_pair(specforge_name, target, tmp_path / "fixed", "sglang")
    assert json.loads((fixed.out / "config.json").read_text())["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]
    assert fixed.after.ok
    [old] = findings(drafter, target, "sglang", "0.5.11")["architecture-unknown"]
    assert not old.fixable and ">= 0.5.12" in old.fix and "LlamaForCausalLMEagle3" not in old.fix
    assert not findings(drafter, target, "vllm", "0.17.1")["architecture-unknown"][0].fixable


def test_mla_requirements_per_release(k2, tmp_path):
    drafter, target = k2
    no_q_lora = _variant(drafter, tmp_path, "noq", q_lora_rank=DROP)
    assert "mla-q-lora-rank" in problems(no_q_lora, target, "sglang", "0.5.23")
    assert "mla-q-lora-rank" not in problems(no_q_lora, target, "vllm", "0.34.0")
    fc_norm = _variant(drafter, tmp_path, "fcn", {f"fc_norm.{i}.weight": ("BF16", (7168,)) for i in range(3)},
                       fc_norm=True)
    assert problems(fc_norm, target, "vllm", "0.22.0") == {"fc-norm-not-applied"}
    assert problems(fc_norm, target, "vllm", "0.23.0") == set()
    assert problems(fc_norm, target, "sglang", "0.5.13") == set()
    assert problems(fc_norm, target, "sglang", "0.5.12") >= {"variant-unread"}  # MLA reads fc_norm from 0.5.13
    nbf = _variant(drafter, tmp_path, "nbf", {"input_norm.weight": ("BF16", (3 * 7168,))}, norm_before_fc=True)
    for engine, version in (("sglang", "0.5.23"), ("vllm", "0.34.0")):
        [error] = findings(nbf, target, engine, version)["variant-unread"]
        assert "MLA drafter" in error.message and "trained without it" in error.fix


def test_kimi_aux_ids_read_differently_by_sglang_0_5_12_and_0_5_13(k2, tmp_path):
    drafter, target = k2  # eagle_config ids [2, 30, 58] on a DeepSeek-V3/Kimi target
    old, new = check_pair(drafter, target, "sglang", "0.5.12"), check_pair(drafter, target, "sglang", "0.5.13")
    assert new.ok and new.aux_layers == [1, 29, 57]  # first id != 1: verbatim, inputs of layers (#25454)
    assert not old.ok and old.aux_layers == [2, 30, 58]  # every id + 1
    [error] = [f for f in old.findings if f.code == "aux-convention"]
    assert "adds 1 to every id" in error.message and error.fixable
    fixed = fix_pair(drafter, target, tmp_path / "fixed", "sglang", engine_version="0.5.12")
    assert json.loads((fixed.out / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] \
        == [1, 29, 57]
    assert fixed.after.ok and fixed.after.aux_layers == [1, 29, 57]
    assert check_pair(fixed.out, target, "sglang", "0.5.13").aux_layers == [1, 29, 57]  # first id 1: +1 there too
