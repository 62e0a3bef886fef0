"""The drafters trained today, per release: sliding-window drafters (served with the window by vLLM, by SGLang only
with --speculative-draft-window-size), Qwen3-layer drafters (vLLM >= 0.24) and P-EAGLE drafters (vLLM 0.29-0.33)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import as_speculators, folder_hash, make_pair, with_tensors

from draftlab.checkpoint import drafter_config, open_checkpoint, target_config
from draftlab.cli import main
from draftlab.compat import check_pair, fix_pair
from draftlab.compat.convert import convert_drafter
from draftlab.compat.loadable import refuse_unloadable
from draftlab.engines.deployment import Deployment
from draftlab.errors import DraftlabError

HEAD = 16  # the tiny targets' head_dim (hidden 64, 4 heads)
WINDOW = {"layer_types": ["sliding_attention"], "sliding_window": 24, "use_sliding_window": True}


def by_code(drafter: Path, target: Path, engine: str, version: str | None = None, **kw) -> dict:
    return {f.code: f for f in check_pair(drafter, target, engine, version, **kw).findings}


def deployment(drafter: Path, target: Path, engine: str, version: str | None = None) -> Deployment:
    return Deployment.resolve(engine, version, drafter_config(open_checkpoint(drafter)),
                              target_config(open_checkpoint(target)))


def set_layer(drafter: Path, **fields) -> Path:
    config = json.loads((drafter / "config.json").read_text())
    config["transformer_layer_config"].update(fields)
    (drafter / "config.json").write_text(json.dumps(config))
    return drafter


# --- sliding window ------------------------------------------------------------------------------------------

def test_sglang_names_the_window_flag_and_is_clean_with_it(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"], **WINDOW)
    finding = by_code(drafter, target, "sglang")["draft-window"]
    assert finding.severity == "warning" and "--speculative-draft-window-size 24" in finding.fix
    assert "trained with sliding window 24" in finding.message and "serves it with full attention" in finding.message
    assert "draft-window" not in by_code(drafter, target, "sglang", draft_window=24)
    other = by_code(drafter, target, "sglang", draft_window=12)["draft-window"]
    assert "serves it with sliding window 12" in other.message
    assert "draft-window" not in by_code(drafter, target, "vllm", "0.17.1")  # vLLM reads the config's window
    assert main(["check", str(drafter), "-t", str(target), "--draft-window", "24", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "draft-window" not in {f["code"] for f in doc["findings"]}
    assert doc["deployment"]["draft_windows"] == [24] and doc["deployment"]["captured_layers"] == doc["aux_layers"]


def test_a_full_attention_drafter_served_with_the_sglang_flag_differs_too(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    finding = by_code(drafter, target, "sglang", draft_window=8)["draft-window"]
    assert "trained with full attention" in finding.message and "launch without" in finding.fix


def test_vllm_serves_a_qwen3_drafters_window_from_0_26(tmp_path, target_configs):
    drafter, target = qwen3_drafter(tmp_path, target_configs, **WINDOW)
    assert "qwen3_eagle3.py" in by_code(drafter, target, "vllm", "0.25.0")["draft-window"].message
    assert "draft-window" not in by_code(drafter, target, "vllm", "0.26.0")


def test_launch_sglang_dry_run_adds_the_window_flag(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"], **WINDOW)
    assert main(["launch", "sglang", "--target", str(target), "--drafter", str(drafter), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    argv = doc["argv"]
    assert argv[argv.index("--speculative-draft-window-size") + 1] == "24"
    assert any("0 finding(s)" in note for note in doc["notes"])  # checked as launched: with the window
    plain, plain_target = make_pair(tmp_path / "full", target_configs["llama"])
    assert main(["launch", "sglang", "--target", str(plain_target), "--drafter", str(plain), "--dry-run",
                 "--json"]) == 0
    assert "--speculative-draft-window-size" not in json.loads(capsys.readouterr().out)["argv"]


@pytest.mark.parametrize("to", ["speculators", "specforge"])
def test_convert_keeps_the_window_keys_both_ways(tmp_path, target_configs, to):
    drafter, target = make_pair(tmp_path, target_configs["llama"], **WINDOW)
    if to == "specforge":
        drafter = convert_drafter(drafter, "speculators", tmp_path / "spec", target=target).out
    out = convert_drafter(drafter, to, tmp_path / "out", target=target).out
    assert drafter_config(open_checkpoint(out)).layer_windows == (24,)
    config = json.loads((out / "config.json").read_text())
    layer = config.get("transformer_layer_config", config)
    assert {k: layer[k] for k in WINDOW} == WINDOW


# --- Qwen3-layer drafters ------------------------------------------------------------------------------------

def qwen3_drafter(tmp: Path, target_configs: dict, **fields) -> tuple[Path, Path]:
    """A speculators ``--draft-arch qwen3`` drafter: transformer_layer_config.model_type qwen3 and per-head norms."""
    drafter, target = make_pair(tmp, target_configs["llama"], layer_prefix="layers.0.", **fields)
    as_speculators(drafter)
    set_layer(drafter, model_type="qwen3")
    with_tensors(drafter, {f"layers.0.self_attn.{n}.weight": ("BF16", (HEAD,)) for n in ("q_norm", "k_norm")})
    return drafter, target


def test_qwen3_drafter_findings_on_vllm_0_23_0_24_and_sglang(tmp_path, target_configs):
    drafter, target = qwen3_drafter(tmp_path, target_configs)
    old = by_code(drafter, target, "vllm", "0.23.0")["qwen3-drafter"]
    assert old.severity == "error" and "Eagle3LlamaForCausalLM" in old.message and "the load fails" in old.message
    assert ">= 0.24.0" in old.fix and not old.fixable
    new = check_pair(drafter, target, "vllm", "0.24.0")
    assert not {"qwen3-drafter", "layer-kind"} & {f.code for f in new.findings}
    assert new.ok, new.findings
    sglang = by_code(drafter, target, "sglang")
    assert sglang["qwen3-drafter"].severity == "error"
    assert "no Qwen3 EAGLE-3 drafter" in sglang["qwen3-drafter"].message
    assert "drops the q_norm/k_norm weights silently" in sglang["qwen3-drafter"].message
    with pytest.raises(DraftlabError, match="qwen3-drafter"):
        refuse_unloadable(drafter, target, deployment(drafter, target, "vllm", "0.23.0"))
    refuse_unloadable(drafter, target, deployment(drafter, target, "vllm", "0.24.0"))


def test_a_model_type_that_is_not_the_weights_layer_is_fixed(tmp_path, target_configs):
    drafter, target = qwen3_drafter(tmp_path, target_configs)
    set_layer(drafter, model_type="llama")  # Qwen3 weights declared as llama: vLLM 0.24 builds the Llama layer
    finding = by_code(drafter, target, "vllm", "0.24.0")["layer-kind"]
    assert finding.fixable and "'qwen3'" in finding.fix
    fixed = fix_pair(drafter, target, tmp_path / "fixed", "vllm", engine_version="0.24.0")
    assert json.loads((fixed.out / "config.json").read_text())["transformer_layer_config"]["model_type"] == "qwen3"
    assert fixed.after.ok
    set_layer(drafter, model_type="phi3")  # vLLM >= 0.24 refuses any other model_type
    assert "Unsupported model_type" in by_code(drafter, target, "vllm", "0.34.0")["layer-kind"].message


def test_convert_carries_a_qwen3_drafter_both_ways(tmp_path, target_configs):
    drafter, target = qwen3_drafter(tmp_path, target_configs)
    before = folder_hash(drafter)
    flat = convert_drafter(drafter, "specforge", tmp_path / "flat").out
    names = set(open_checkpoint(flat).tensors)
    assert {"midlayer.self_attn.q_norm.weight", "midlayer.self_attn.k_norm.weight"} <= names
    back = convert_drafter(flat, "speculators", tmp_path / "back").out
    assert {"layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight"} <= set(open_checkpoint(back).tensors)
    assert drafter_config(open_checkpoint(back)).layer_kind == "qwen3"
    assert "qwen3-drafter" in by_code(flat, target, "sglang")  # no engine reads a Qwen3 layer from the flat layout
    assert folder_hash(drafter) == before


# --- P-EAGLE -------------------------------------------------------------------------------------------------

@pytest.fixture
def peagle(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"], layer_prefix="layers.0.")
    as_speculators(drafter, speculators_model_type="peagle")
    return drafter, target


@pytest.mark.parametrize(("version", "severity"), [("0.28.0", "error"), ("0.29.0", "info"), ("0.33.0", "info"),
                                                   ("0.34.0", "error")])
def test_peagle_config_per_vllm_release(peagle, version, severity):
    drafter, target = peagle
    finding = by_code(drafter, target, "vllm", version)["parallel-drafting"]
    assert finding.severity == severity and "P-EAGLE" in finding.message
    with pytest.raises(DraftlabError, match="parallel drafting") as err:
        refuse_unloadable(drafter, target, deployment(drafter, target, "vllm", version))
    assert "\n" not in str(err.value)


def test_mask_hidden_drafts_autoregressively_on_vllm_0_34(tmp_path, target_configs, capsys):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    with_tensors(drafter, {"mask_hidden": ("BF16", (1, 3 * 64))})
    newest = by_code(drafter, target, "vllm", "0.34.0")
    assert newest["parallel-drafting"].severity == "warning" and "autoregressively" in newest["parallel-drafting"].message
    assert "weight-names" not in newest
    assert by_code(drafter, target, "vllm", "0.30.0")["parallel-drafting"].severity == "info"
    assert by_code(drafter, target, "sglang")["parallel-drafting"].severity == "warning"
    assert main(["inspect", str(drafter), "--json"]) == 0
    assert "parallel" in json.loads(capsys.readouterr().out)["drafting"]


def test_the_trained_toy_drafters_per_release(toy_pair):
    """The toy's trained Qwen3-layer and sliding-window drafters (draftlab.toy.variants), as each release loads them."""
    from draftlab.toy.variants import WINDOW, cached_variant_drafter

    qwen3, target = cached_variant_drafter(toy_pair, "qwen3"), toy_pair.target_dir
    assert by_code(qwen3, target, "vllm", "0.23.0")["qwen3-drafter"].severity == "error"
    assert check_pair(qwen3, target, "vllm", "0.24.0").ok
    assert "qwen3-drafter" in by_code(qwen3, target, "sglang")
    window = cached_variant_drafter(toy_pair, "sliding-window")
    assert f"--speculative-draft-window-size {WINDOW}" in by_code(window, target, "sglang")["draft-window"].fix
    assert check_pair(window, target, "sglang", draft_window=WINDOW).findings == []
    assert check_pair(window, target, "vllm").findings == []
