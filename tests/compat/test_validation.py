"""check predicts the load failures the runtime and the engines hit (issue 42 part 2): variant tensors of the wrong
shape or count, flags that are not JSON booleans (read by Python truthiness, as the engines do), NaN / infinite /
non-positive numbers; and ``check --fix`` writes nothing when nothing is fixable."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from builders import folder_hash, make_pair, with_tensors

from draftlab.checkpoint import DrafterConfig
from draftlab.checkpoint.variants import boolean_flags
from draftlab.cli import main
from draftlab.compat import check_pair, fix_pair
from draftlab.compat.loadable import refuse_unloadable
from draftlab.engines.deployment import Deployment
from draftlab.errors import DraftlabError

H = 64


def codes(drafter: Path, target: Path, engine: str = "sglang", version: str | None = None) -> dict[str, str]:
    return {f.code: f.severity for f in check_pair(drafter, target, engine, version).findings}


def edit_config(drafter: Path, **fields) -> Path:
    config = json.loads((drafter / "config.json").read_text())
    (drafter / "config.json").write_text(json.dumps({**config, **fields}))
    return drafter


def norms_only(drafter: Path, count: int) -> Path:
    """``drafter``'s weights with ``count`` fc_norm.{i} tensors instead of its 3."""
    from draftlab.checkpoint import open_checkpoint
    from draftlab.checkpoint.synth import write_safetensors

    ckpt = open_checkpoint(drafter)
    specs = {n: (i.dtype, tuple(i.shape)) for n, i in ckpt.tensors.items() if not n.startswith("fc_norm.")}
    specs.update({f"fc_norm.{i}.weight": ("BF16", (H,)) for i in range(count)})
    values = {n: ckpt.read_ints(n) for n in ("d2t", "t2d") if n in specs}
    write_safetensors(drafter / "model.safetensors", specs, values=values)
    return drafter


@pytest.mark.parametrize("count", [1, 5])
def test_fc_norm_with_other_than_one_norm_per_aux_layer_is_an_error(tmp_path, target_configs, count):
    drafter, target = make_pair(tmp_path, target_configs["llama"], fc_norm=True)
    assert "variant-tensors" not in codes(drafter, target)
    norms_only(drafter, count)
    for engine in ("sglang", "vllm"):
        [finding] = [f for f in check_pair(drafter, target, engine).findings if f.code == "variant-tensors"]
        assert finding.severity == "error" and f"{count} fc_norm.{{i}}.weight tensors are stored" in finding.message
        assert "build 3" in finding.message
    assert main(["check", str(drafter), "-t", str(target)]) == 1


def test_input_norm_of_the_wrong_shape_is_an_error(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], norm_before_fc=True)
    with_tensors(drafter, {"input_norm.weight": ("BF16", (2 * H,))})
    [finding] = [f for f in check_pair(drafter, target, "vllm").findings if f.code == "variant-tensors"]
    assert finding.field == "input_norm.weight" and f"is [{2 * H}] but the engines build it [{3 * H}]" in finding.message
    with_tensors(drafter, {"input_norm.weight": ("BF16", (3 * H,))})
    assert "variant-tensors" not in codes(drafter, target, "vllm")


@pytest.mark.parametrize(("value", "severity"), [("false", "error"), ("true", "warning"), (1, "warning"),
                                                 (0, "warning"), ("no", "error")])
def test_a_flag_that_is_not_a_json_boolean_is_named_and_read_by_truthiness(tmp_path, target_configs, value, severity):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    edit_config(drafter, norm_output=value)
    [finding] = [f for f in check_pair(drafter, target, "vllm").findings if f.code == "flag-not-boolean"]
    assert finding.severity == severity and finding.field == "norm_output" and repr(value) in finding.message
    on = bool(value)
    assert f"as {'on' if on else 'off'}" in finding.message
    layer = json.loads((drafter / "config.json").read_text())
    assert DrafterConfig.from_dict(layer).variant.norm_output is on  # draftlab's runtime reads it as the engines do
    assert finding.fixable == (severity == "warning")


def test_fc_norm_false_as_a_string_turns_the_norms_on(tmp_path, target_configs):
    """"false" is truthy: the engines build and load the fc_norm tensors, and so does draftlab."""
    drafter, target = make_pair(tmp_path, target_configs["llama"], fc_norm="false")
    with_tensors(drafter, {f"fc_norm.{i}.weight": ("BF16", (H,)) for i in range(3)})
    found = codes(drafter, target, "sglang", "0.5.23")
    assert found.get("flag-not-boolean") == "error" and "variant-no-flag" not in found
    config = json.loads((drafter / "config.json").read_text())
    assert DrafterConfig.from_dict(config).variant.fc_norm is True


def test_fix_writes_the_boolean_the_engines_read_and_train_never_keeps_a_string(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    edit_config(drafter, norm_output="true", eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5],
                                                           "norm_before_fc": 0})
    before = folder_hash(drafter)
    fixed = fix_pair(drafter, target, tmp_path / "fixed", "vllm")
    written = json.loads((fixed.out / "config.json").read_text())
    assert written["norm_output"] is True and written["eagle_config"]["norm_before_fc"] is False
    assert "flag-not-boolean" not in {f.code for f in fixed.after.findings} and folder_hash(drafter) == before
    config = json.loads((drafter / "config.json").read_text())
    assert boolean_flags({**config, "fc_norm": "false"})["fc_norm"] is True  # what export_drafter writes


@pytest.mark.parametrize(("key", "value", "why"), [("rms_norm_eps", math.nan, "NaN"), ("rope_theta", math.inf, "infinite"),
                                                   ("rms_norm_eps", -1e-6, "not positive"),
                                                   ("max_position_embeddings", 0, "not positive"),
                                                   ("sliding_window", -5, "not positive")])
def test_nan_infinite_and_non_positive_numbers_are_errors(tmp_path, target_configs, capsys, key, value, why):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    edit_config(drafter, **{key: value})
    before = folder_hash(drafter)
    [finding] = [f for f in check_pair(drafter, target, "sglang").findings if f.code == "config-value"]
    assert finding.severity == "error" and finding.field == key and f"({why})" in finding.message
    assert main(["check", str(drafter), "-t", str(target), "--json"]) == 1
    assert not json.loads(capsys.readouterr().out)["ok"]
    from draftlab.checkpoint import drafter_config, open_checkpoint, target_config

    deployment = Deployment.resolve("sglang", None, drafter_config(open_checkpoint(drafter)),
                                    target_config(open_checkpoint(target)))
    with pytest.raises(DraftlabError, match="config-value"):
        refuse_unloadable(drafter, target, deployment)
    assert folder_hash(drafter) == before


def test_a_nan_in_the_target_is_named_too(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    edit_config(target, rms_norm_eps=math.nan)
    [finding] = [f for f in check_pair(drafter, target, "vllm").findings if f.code == "config-value"]
    assert finding.field == "target.rms_norm_eps"


def test_fix_with_nothing_fixable_writes_no_folder(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    out = tmp_path / "fixed"
    assert main(["check", str(drafter), "-t", str(target), "--fix", str(out)]) == 0
    assert not out.exists() and "Nothing to fix" in capsys.readouterr().out
    assert main(["check", str(drafter), "-t", str(target), "--fix", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["written"] is False and doc["fixed"] == [] and not out.exists()
    from draftlab.report.html.compat import fix_section

    section = fix_section(doc)  # the report page says so too, never "Written to"
    assert "wrote no folder" in section.heading and "Written to" not in "".join(section.body)
    edit_config(drafter, rms_norm_eps=math.nan)  # an error, but not one --fix can fix: still nothing written
    assert main(["check", str(drafter), "-t", str(target), "--fix", str(out)]) == 1
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(("name", "shape", "code"), [
    ("midlayer.self_attn.o_proj.weight", (H, 2 * H), "tensor-shape"),
    ("midlayer.self_attn.k_proj.weight", (4 * 16, 2 * H), "tensor-shape"),  # 4 kv heads where the config says 2
    ("midlayer.mlp.down_proj.weight", (H, 3 * H), "tensor-shape"),
    ("norm.weight", (2 * H,), "tensor-shape"),
    ("lm_head.weight", (128, 2 * H), "tensor-shape"),
])
def test_a_layer_tensor_of_another_shape_than_the_config_builds_is_an_error(tmp_path, target_configs, name, shape,
                                                                             code):
    drafter, target = make_pair(tmp_path, target_configs["llama"], num_key_value_heads=2)
    assert "tensor-shape" not in codes(drafter, target)
    with_tensors(drafter, {name: ("BF16", shape)})
    before = folder_hash(drafter)
    [finding] = [f for f in check_pair(drafter, target, "vllm").findings if f.code == code]
    assert finding.severity == "error" and finding.field == name and str(list(shape)) in finding.message
    assert main(["check", str(drafter), "-t", str(target)]) == 1 and folder_hash(drafter) == before


def test_a_missing_layer_tensor_is_an_error(tmp_path, target_configs):
    from draftlab.checkpoint import open_checkpoint
    from draftlab.checkpoint.synth import write_safetensors

    drafter, target = make_pair(tmp_path, target_configs["llama"])
    ckpt = open_checkpoint(drafter)
    specs = {n: (i.dtype, tuple(i.shape)) for n, i in ckpt.tensors.items() if n != "midlayer.mlp.up_proj.weight"}
    write_safetensors(drafter / "model.safetensors", specs, values={n: ckpt.read_ints(n) for n in ("d2t", "t2d")})
    [finding] = [f for f in check_pair(drafter, target, "sglang").findings if f.code == "missing-tensor"]
    assert finding.field == "midlayer.mlp.up_proj.weight" and "uninitialised" in finding.message


@pytest.mark.parametrize(("scaling", "ok"), [
    ({"rope_type": "bogus", "factor": 2.0}, False), ({"rope_type": "yarn"}, False),
    ({"rope_type": "llama3", "factor": 8.0}, False), ({"type": "linear", "factor": 2.0}, True),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}, True),
])
def test_rope_scaling_the_runtime_cannot_build_is_an_error(tmp_path, target_configs, scaling, ok):
    """Exactly the configs draftlab's runtime (transformers' RoPE validation) refuses to build."""
    from draftlab.models.drafter import Eagle3Drafter

    drafter, target = make_pair(tmp_path, target_configs["llama"], rope_scaling=scaling, embed=True)
    found = codes(drafter, target, "vllm")
    assert ("rope-invalid" not in found) == ok
    try:
        Eagle3Drafter.load(drafter)
        built = True
    except (KeyError, ValueError):
        built = False
    assert built == ok


@pytest.mark.parametrize(("key", "value"), [
    ("tie_word_embeddings", 2), ("attention_bias", None), ("bos_token_id", "1"), ("layer_types", True),
    ("layer_types", []), ("rope_scaling", 1.5), ("initializer_range", 2.0), ("max_position_embeddings", "x"),
    ("rope_theta", None),
])
def test_a_field_the_layer_config_cannot_take_is_an_error_as_the_runtime_refuses_it(tmp_path, target_configs, key,
                                                                                   value):
    from draftlab.models.drafter import Eagle3Drafter

    drafter, target = make_pair(tmp_path, target_configs["llama"], embed=True)
    edit_config(drafter, **{key: value})
    found = codes(drafter, target, "vllm")
    assert found.get("config-type") == "error" and "config-value" not in found, found
    with pytest.raises(Exception):  # noqa: B017 - transformers' own errors: what check must predict
        Eagle3Drafter.load(drafter)


def test_hidden_act_other_than_silu_is_an_error(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    edit_config(drafter, hidden_act="gelu")
    assert codes(drafter, target, "sglang").get("hidden-act") == "error"
    edit_config(drafter, hidden_act="silu")
    assert "hidden-act" not in codes(drafter, target, "sglang")


def test_architectures_that_are_no_list_are_one_line(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    edit_config(drafter, architectures=1)
    assert main(["check", str(drafter), "-t", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'architectures' is 1, not a list of class names" in err[0]


def test_fewer_layers_stored_than_the_config_builds_and_speculators_extra_layers(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    edit_config(drafter, num_hidden_layers=2)
    finding = next(f for f in check_pair(drafter, target, "vllm").findings if f.field == "num_hidden_layers"
                   and f.code == "missing-tensor")
    assert "the weights hold 1 decoder layer(s)" in finding.message
    with_tensors(drafter, {"layers.1.input_layernorm.weight": ("BF16", (H,))})
    assert codes(drafter, target, "vllm").get("drafter-unsupported") == "error"  # draftlab refuses layers.1+


def test_a_qwen2_5_vl_drafters_mrope_is_named_and_refused_in_one_line(tmp_path, target_configs):
    """SpecForge's Qwen2.5-VL drafters (rope_scaling type mrope): the engines serve them, draftlab does not compute
    them, so check says so (not rope-invalid) and the runtime refuses in one line instead of a KeyError."""
    from draftlab.models.drafter import Eagle3Drafter

    drafter, target = make_pair(tmp_path, target_configs["llama"], embed=True,
                                rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]})
    found = codes(drafter, target, "sglang")
    assert found.get("drafter-unsupported") == "error" and "rope-invalid" not in found
    with pytest.raises(DraftlabError, match="'mrope'"):
        Eagle3Drafter.load(drafter)
