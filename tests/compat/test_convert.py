"""draftlab convert: both layouts both ways, tensors bit for bit, configs equal in meaning, check-clean output."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from builders import DROP, SEEN_AUX, folder_hash, make_pair, stored_tensor_bytes

from draftlab.checkpoint import DrafterConfig, open_checkpoint
from draftlab.cli import main
from draftlab.compat import check_pair
from draftlab.compat.convert import convert_drafter
from draftlab.engines import configured_aux_layers

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 1024}


def meaning(folder) -> dict:
    """What a drafter config says, independent of its layout: every typed field, and its trained aux layers."""
    d = DrafterConfig.from_dict(json.loads((folder / "config.json").read_text()))
    fields = {k: v for k, v in dataclasses.asdict(d).items() if k not in ("layout", "architecture", "layer_config",
                                                                        "eagle_config_aux_ids", "top_level_aux_ids")}
    found = configured_aux_layers(d)
    return {**fields, "aux": found.layers if found else None}


@pytest.fixture
def pair(tmp_path, target_configs):
    target_cfg = {**target_configs["llama"], "rope_parameters": {"rope_theta": 10000.0, **LLAMA3_ROPE},
                  "max_position_embeddings": 8192}
    return make_pair(tmp_path, target_cfg, embed=True, rope_scaling=LLAMA3_ROPE, max_position_embeddings=8192)


def test_round_trip_is_bit_exact_and_equal_in_meaning_and_check_clean(tmp_path, pair):
    drafter, target = pair
    before = folder_hash(drafter)
    spec = convert_drafter(drafter, "speculators", tmp_path / "spec", target=target)
    assert folder_hash(drafter) == before  # the input is never touched
    config = json.loads((tmp_path / "spec" / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["architectures"] == ["Eagle3Speculator"]
    assert config["speculators_config"]["verifier"] == {"name_or_path": str(target),
                                                         "architectures": ["LlamaForCausalLM"]}
    assert config["speculators_config"]["default_proposal_method"] == "greedy"
    assert config["eagle_aux_hidden_state_layer_ids"] == [k + 1 for k in SEEN_AUX]  # vLLM's convention
    assert "eagle_config" not in config and config["norm_before_residual"] is False
    layer = config["transformer_layer_config"]
    assert layer["rope_scaling"] == LLAMA3_ROPE and layer["max_position_embeddings"] == 8192
    assert config["draft_vocab_size"] == 128 and layer["vocab_size"] == 512
    names = set(open_checkpoint(tmp_path / "spec").tensors)
    assert not any(n.startswith("midlayer.") for n in names) and "layers.0.self_attn.q_proj.weight" in names
    assert {spec.renamed.get(k, k): v for k, v in stored_tensor_bytes(drafter).items()} == stored_tensor_bytes(tmp_path / "spec")
    assert spec.engine == "vllm" and spec.check.ok and spec.check.aux_layers == SEEN_AUX
    assert [f.code for f in spec.check.findings if f.severity != "info"] == []

    back = convert_drafter(tmp_path / "spec", "specforge", tmp_path / "back", target=target)
    assert stored_tensor_bytes(tmp_path / "back") == stored_tensor_bytes(drafter)
    assert meaning(tmp_path / "back") == meaning(drafter) == meaning(tmp_path / "spec")
    flat = json.loads((tmp_path / "back" / "config.json").read_text())
    assert flat["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == SEEN_AUX
    assert flat["rope_scaling"] == LLAMA3_ROPE and flat["architectures"] == ["LlamaForCausalLMEagle3"]
    assert back.engine == "sglang" and back.check.ok
    assert [f.code for f in back.check.findings if f.severity != "info"] == []
    assert check_pair(tmp_path / "back", target, "vllm").aux_layers == SEEN_AUX  # both engines agree


def test_bin_drafter_is_written_as_safetensors_with_the_same_bytes(tmp_path, target_configs):
    import torch

    drafter, target = make_pair(tmp_path, target_configs["llama"])
    state = open_checkpoint(drafter).load()
    torch.save(state, drafter / "pytorch_model.bin")
    (drafter / "model.safetensors").unlink()
    before = folder_hash(drafter)
    result = convert_drafter(drafter, "speculators", tmp_path / "out", target=target)
    assert folder_hash(drafter) == before and result.weights_from == "pytorch"
    out = open_checkpoint(tmp_path / "out")
    assert out.format == "safetensors" and [f.name for f in out.weight_files] == ["model.safetensors"]
    assert not (tmp_path / "out" / "pytorch_model.bin").exists()
    assert {result.renamed.get(k, k): v for k, v in stored_tensor_bytes(drafter).items()} == stored_tensor_bytes(tmp_path / "out")
    assert result.check.ok


def test_sharded_input_keeps_its_index(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    ckpt = open_checkpoint(drafter)
    from safetensors.torch import save_file

    tensors = ckpt.load()
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[:8], "model-00002-of-00002.safetensors": names[8:]}
    for file, part in halves.items():
        save_file({n: tensors[n] for n in part}, str(drafter / file), metadata={"format": "pt"})
    (drafter / "model.safetensors").unlink()
    (drafter / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: f for f, part in halves.items() for n in part}}))
    result = convert_drafter(drafter, "speculators", tmp_path / "out", target=target)
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(open_checkpoint(tmp_path / "out").tensors)
    assert any(k.startswith("layers.0.") for k in index["weight_map"]) and result.check.ok


def test_speculators_without_ids_or_residual_flag_keeps_their_meaning(tmp_path, target_configs):
    """vLLM reads a missing norm_before_residual as true in a speculators config (false in a flat one),
    and null ids as the default: the flat output must say the same."""
    from builders import as_speculators

    drafter, target = make_pair(tmp_path, target_configs["llama"], layer_prefix="layers.0.", eagle_config=DROP,
                                eagle_aux_hidden_state_layer_ids=DROP)
    as_speculators(drafter)
    config = json.loads((drafter / "config.json").read_text())
    del config["norm_before_residual"]
    (drafter / "config.json").write_text(json.dumps(config))
    result = convert_drafter(drafter, "specforge", tmp_path / "out", target=target)
    flat = json.loads((tmp_path / "out" / "config.json").read_text())
    assert flat["norm_before_residual"] is True
    assert "eagle_aux_hidden_state_layer_ids" not in flat and "eagle_config" not in flat
    assert "target_hidden_size" not in flat and "norm_output" not in flat
    assert meaning(tmp_path / "out") == meaning(drafter)
    assert "norm-before-residual" in {f.code for f in result.check.findings}  # SGLang cannot run it: said
    assert main(["convert", str(drafter), "--to", "specforge", "-o", str(tmp_path / "cli"), "-t", str(target)]) == 1


def test_without_target_the_verifier_is_null_and_said(tmp_path, target_configs):
    drafter, _ = make_pair(tmp_path, target_configs["llama"])
    result = convert_drafter(drafter, "speculators", tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["speculators_config"]["verifier"] == {"name_or_path": None, "architectures": []}
    assert result.check is None
    assert any(c.field == "speculators_config.verifier" and "--target" in c.why for c in result.config_changes)


def test_cli_json_and_refusals(tmp_path, pair, capsys):
    drafter, target = pair
    assert main(["convert", str(drafter), "--to", "speculators", "-o", str(tmp_path / "out"), "-t", str(target),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"out", "from_layout", "to_layout", "tensors", "renamed", "config_changes", "check"} <= doc.keys()
    assert doc["from_layout"] == "specforge" and doc["to_layout"] == "speculators" and doc["tensors"] == 16
    assert {c["field"] for c in doc["config_changes"]} >= {"eagle_config", "norm_before_residual",
                                                           "speculators_config.verifier"}
    before = folder_hash(drafter)
    for out, words in ((drafter, "itself"), (drafter / "sub", "inside"), (tmp_path / "out", "already exists"),
                       (target / "x", "inside")):
        assert main(["convert", str(drafter), "--to", "specforge", "-o", str(out), "-t", str(target)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
    assert main(["convert", str(drafter), "--to", "eagle", "-o", str(tmp_path / "o2")]) == 2
    assert "specforge, speculators" in capsys.readouterr().err
    assert folder_hash(drafter) == before and not (tmp_path / "o2").exists()


REFERENCE = Path("/work/shared/reference/configs")
REAL_CONFIGS = sorted((REFERENCE / "specforge-drafters").glob("*.json")) + [
    REFERENCE / "aq-medai-kimi-k2-instruct-eagle3.config.json"]


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="the reference configs are not on this machine")
@pytest.mark.parametrize("path", REAL_CONFIGS, ids=[p.stem for p in REAL_CONFIGS])
def test_real_specforge_configs_round_trip_in_meaning(tmp_path, path):
    """Every drafter config SpecForge ships (and AQ-MedAI's Kimi-K2 one, aux ids [2, 30, 58]): rope,
    context, fc_norm, draft vocabulary and aux ids survive SpecForge -> speculators -> SpecForge."""
    from draftlab.checkpoint.synth import write_config, write_safetensors

    drafter = tmp_path / "in"
    write_config(drafter, json.loads(path.read_text()))
    config = json.loads(path.read_text())
    norms = {f"fc_norm.{i}.weight": ("BF16", (4,)) for i in range(3)} if config.get("fc_norm") else {}
    write_safetensors(drafter / "model.safetensors", {"midlayer.input_layernorm.weight": ("BF16", (4,)), **norms})
    convert_drafter(drafter, "speculators", tmp_path / "spec")
    convert_drafter(tmp_path / "spec", "specforge", tmp_path / "back")
    assert meaning(tmp_path / "spec") == meaning(drafter) == meaning(tmp_path / "back")
    original, back = (json.loads((f / "config.json").read_text()) for f in (drafter, tmp_path / "back"))
    for key in ("rope_scaling", "rope_theta", "max_position_embeddings", "fc_norm", "draft_vocab_size"):
        assert back.get(key) == original.get(key), key


def test_specforge_with_layers0_names_is_renamed_for_sglang(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], layer_prefix="layers.0.",
                                architectures=["Eagle3LlamaForCausalLM"])
    result = convert_drafter(drafter, "specforge", tmp_path / "out", target=target)
    assert len(result.renamed) == 10 and all(v.startswith("midlayer.") for v in result.renamed.values())
    assert result.check.ok and "weight-names" not in {f.code for f in result.check.findings}


def test_a_drafter_without_aux_features_is_refused_for_speculators(tmp_path, target_configs, capsys):
    drafter, _ = make_pair(tmp_path, target_configs["llama"], eagle_config={"use_aux_hidden_state": False})
    assert main(["convert", str(drafter), "--to", "speculators", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "use_aux_hidden_state" in err[0] and str(drafter / "config.json") in err[0]
    assert not (tmp_path / "out").exists()


def test_variant_flags_and_tensors_carried_both_ways(tmp_path, target_configs):
    """norm_before_fc (written nested, as SGLang and vLLM 0.22+ read it first), fc_norm and norm_output reach the
    speculators top level, where speculators and vLLM read them, and come back; their tensors bit for bit."""
    from builders import with_tensors

    drafter, target = make_pair(tmp_path, target_configs["llama"], fc_norm=True, norm_output=True,
                                eagle_config={"eagle_aux_hidden_state_layer_ids": SEEN_AUX, "norm_before_fc": True})
    with_tensors(drafter, {"input_norm.weight": ("BF16", (192,)),
                           **{f"fc_norm.{i}.weight": ("BF16", (64,)) for i in range(3)}})
    spec = convert_drafter(drafter, "speculators", tmp_path / "spec", target=target)
    config = json.loads((tmp_path / "spec" / "config.json").read_text())
    assert (config["norm_before_fc"], config["fc_norm"], config["norm_output"]) == (True, True, True)
    assert spec.check.ok and [f.code for f in spec.check.findings if f.severity != "info"] == []
    back = convert_drafter(tmp_path / "spec", "specforge", tmp_path / "back", target=target)
    assert meaning(drafter) == meaning(tmp_path / "spec") == meaning(tmp_path / "back")
    assert meaning(drafter)["variant"] == {"norm_before_fc": True, "fc_norm": True, "norm_output": True, "mla": None,
                                         "norm_output_declared": False}
    kept = stored_tensor_bytes(drafter)
    assert {spec.renamed.get(k, k): v for k, v in kept.items()} == stored_tensor_bytes(tmp_path / "spec")
    assert stored_tensor_bytes(tmp_path / "back") == kept and "input_norm.weight" in kept
    # the flat copy runs in SGLang; norm_output true in a flat config is said to have two meanings
    assert back.check.ok and [f.code for f in back.check.findings if f.severity != "info"] == ["norm-output-meaning"]


def test_mla_drafter_is_refused_for_speculators_in_one_line(tmp_path, capsys):
    from builders import k2_mla_pair

    drafter, _ = k2_mla_pair(tmp_path)
    assert main(["convert", str(drafter), "--to", "speculators", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "MLA drafter" in err[0] and not (tmp_path / "out").exists()


def test_the_verifier_is_named_so_speculators_finds_it_from_any_directory(tmp_path, pair, monkeypatch, capsys):
    """A relative --target is written absolute (speculators resolves name_or_path from where it runs); a hub
    id is written as given, the folder then unchecked, and the output says which."""
    drafter, target = pair
    monkeypatch.chdir(target.parent)
    assert main(["convert", drafter.name, "--to", "speculators", "-o", "spec", "-t", target.name]) == 0
    written = json.loads((tmp_path / "spec" / "config.json").read_text())["speculators_config"]["verifier"]
    assert written["name_or_path"] == str(target) and Path(written["name_or_path"]).is_absolute()
    assert "as an absolute path" in capsys.readouterr().out

    hub = "meta-llama/Llama-3.1-8B-Instruct"
    assert main(["convert", str(drafter), "--to", "speculators", "-o", str(tmp_path / "hub"), "-t", hub]) == 0
    written = json.loads((tmp_path / "hub" / "config.json").read_text())["speculators_config"]["verifier"]
    assert written == {"name_or_path": hub, "architectures": []}
    out = capsys.readouterr().out
    assert "a hub id" in out and f"not checked: --target {hub} is a hub id" in out
    assert main(["convert", str(drafter), "--to", "specforge", "-o", str(tmp_path / "sf"), "-t", hub]) == 2
    assert f"--target {hub} is not a local folder" in capsys.readouterr().err and not (tmp_path / "sf").exists()


def test_a_deepseek_targets_aux_ids_are_written_by_sglangs_deepseek_rule(tmp_path, target_configs):
    """A speculators drafter for a DeepSeek/Kimi target naming the outputs of layers 2, 3, 4 (vLLM ids 3, 4, 5):
    SGLang 0.5.13+ takes a DeepSeek list that does not open with 1 verbatim as inputs of layers, so the flat
    copy must name 3, 4, 5 there, not the Llama convention's 2, 3, 4 (which would capture layers 1, 2, 3)."""
    from builders import as_speculators

    drafter, target = make_pair(tmp_path, target_configs["deepseek_v3"])
    as_speculators(drafter, eagle_aux_hidden_state_layer_ids=[3, 4, 5])
    result = convert_drafter(drafter, "specforge", tmp_path / "flat", target=target)
    config = json.loads((tmp_path / "flat" / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [3, 4, 5]
    assert config["eagle_aux_hidden_state_layer_ids"] == [3, 4, 5]
    assert result.check.aux_layers == [2, 3, 4] and result.check.ok


@pytest.mark.parametrize(("fields", "extra", "words"), [
    ({"fc_norm": True}, None, "fc_norm is true but there are no fc_norm.{i}.weight tensors"),
    ({}, {"midlayer.mlp.experts.0.gate_proj.weight": ("BF16", (8, 64))}, "MoE FFN"),
    ({"use_moe": True}, None, "use_moe is true"),
])
def test_convert_refuses_what_no_engine_serves_as_trained(tmp_path, target_configs, capsys, fields, extra, words):
    """A flag without its tensors, an MoE FFN: one line, exit 2, nothing written, the input unchanged."""
    from builders import with_tensors

    drafter, _ = make_pair(tmp_path, target_configs["llama"])
    config = json.loads((drafter / "config.json").read_text())
    (drafter / "config.json").write_text(json.dumps({**config, **fields}))
    if extra:
        with_tensors(drafter, extra)
    before = folder_hash(drafter)
    for to in ("speculators", "specforge"):
        assert main(["convert", str(drafter), "--to", to, "-o", str(tmp_path / "out")]) == 2
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        assert out == "" and len(lines) == 1 and words in lines[0] and "cannot be converted" in lines[0]
        assert str(drafter / "config.json") in lines[0] and "Traceback" not in err
    assert not (tmp_path / "out").exists() and folder_hash(drafter) == before
