"""One resolved deployment behind every command (issue 39, part 1): the release named by --engine and
--engine-version is the one whose captured layers every command computes with, and names in its JSON.

The pair is Kimi-shaped in what the aux rules read: a 61-layer DeepSeek-V3 target (MLA, DeepseekV3ForCausalLM,
the "deepseek" family) of hidden size 16, and a Llama drafter for it. Random weights: the layers fed, not the
acceptance, are what is under test; the runner's own aux layers are asserted beside the JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers

from draftlab.checkpoint.configs import TargetConfig
from draftlab.checkpoint.synth import specforge_drafter_config, write_drafter, write_target
from draftlab.cli import main
from draftlab.models.pair import deployment_for, load_pair

LAYERS = 61
NESTED = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [3, 30, 57], "use_aux_hidden_state": True}}
AQ_MEDAI = {"eagle_aux_hidden_state_layer_ids": [2, 30, 58],
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True}}
# (drafter ids, engine, version) -> the canonical layers that release captures (issue 39's measured cases)
CASES = [(NESTED, "vllm", "0.22.0", [2, 29, 56]), (NESTED, "vllm", "0.34.0", [1, 29, 57]),
         (AQ_MEDAI, "sglang", "0.5.12", [2, 30, 58]), (AQ_MEDAI, "sglang", "0.5.13", [1, 29, 57])]
CLEAN = ("0.22.0", "0.5.13")  # the releases that capture what these drafters' configs say they were trained on


def kimi_shaped_config() -> dict:
    cfg = transformers.DeepseekV3Config(
        vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=LAYERS,
        num_attention_heads=2, num_key_value_heads=2, n_routed_experts=2, num_experts_per_tok=1, n_shared_experts=1,
        first_k_dense_replace=LAYERS, q_lora_rank=8, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4,
        v_head_dim=4, max_position_embeddings=256, bos_token_id=1, eos_token_id=2)
    config = cfg.to_dict()
    config["architectures"] = ["DeepseekV3ForCausalLM"]
    config["dtype"] = "float32"
    return config


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("kimi")
    config = kimi_shaped_config()
    out = {"target": write_target(tmp / "target", config), "target_b": write_target(tmp / "target_b", config)}
    t = TargetConfig.from_dict(config)
    for name, ids in (("nested", NESTED), ("aq", AQ_MEDAI)):
        drafter = specforge_drafter_config(t, draft_vocab_size=32, torch_dtype="float32", **ids)
        drafter.pop("eagle_aux_hidden_state_layer_ids", None) if ids is NESTED else None
        out[name] = write_drafter(tmp / name, drafter)
    prompts = tmp / "prompts.jsonl"
    prompts.write_text(json.dumps({"input_ids": [5, 9, 14, 3, 22, 7]}) + "\n")
    out["prompts"] = prompts
    data = tmp / "data.jsonl"
    data.write_text("".join(json.dumps({"input_ids": list(range(4 + i, 20 + i)), "loss_mask": [1] * 16}) + "\n"
                            for i in range(2)))
    out["data"] = data
    return out


def _json(capsys, argv: list[str]) -> dict:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def _computed_with(capsys, argv: list[str], want: list[int]) -> dict | None:
    """The command's JSON, or None where it refused the pair in one line naming the layers the release
    captures (a pair check finds an error in: the release serves it otherwise than it was trained)."""
    code = main(argv)
    captured = capsys.readouterr()
    if code == 0:
        return json.loads(captured.out)
    err = captured.err.strip().splitlines()
    assert code == 2 and len(err) == 1 and str(want) in err[0], captured.err
    return None


def _release(engine: str, version: str) -> list[str]:
    return ["--engine", engine, "--engine-version", version, "--json", "--threads", "1"]


@pytest.mark.parametrize("ids,engine,version,want", CASES, ids=[f"{c[1]}-{c[2]}" for c in CASES])
def test_the_loaded_pair_feeds_the_releases_layers(folders, ids, engine, version, want):
    drafter = folders["nested" if ids is NESTED else "aq"]
    deployment = deployment_for(folders["target"], drafter, engine, version)
    pair = load_pair(folders["target"], drafter, deployment, cache="dynamic")
    assert pair.aux_layers == pair.target.aux_layers == want
    assert pair.deployment.describe()["captured_layers"] == want


@pytest.mark.parametrize("ids,engine,version,want", CASES, ids=[f"{c[1]}-{c[2]}" for c in CASES])
def test_probe_generate_drift_name_the_releases_layers(folders, capsys, ids, engine, version, want):
    drafter, target, prompts = str(folders["nested" if ids is NESTED else "aq"]), str(folders["target"]), \
        str(folders["prompts"])
    shape = ["--steps", "2", "--topk", "1", "--num-draft-tokens", "3", "--max-new-tokens", "4"]
    docs = {
        "probe": _computed_with(capsys, ["probe", "--target", target, "--drafter", drafter, "--prompts", prompts,
                                         *shape, *_release(engine, version)], want),
        "generate": _computed_with(capsys, ["generate", "--target", target, "--drafter", drafter, "--prompts",
                                            prompts, *shape, *_release(engine, version)], want),
        "drift": _computed_with(capsys, ["drift", "--target-a", target, "--target-b", str(folders["target_b"]),
                                         "--prompts", prompts, "--drafter", drafter, *shape,
                                         *_release(engine, version)], want),
    }
    for name, doc in docs.items():
        if doc is not None:
            config = doc["config"]
            assert (config["engine"], config["engine_version"], config["captured_layers"]) == (engine, version, want)
            assert config["aux_layers" if name != "drift" else "layers"] == want  # drift compares the layers fed
    if version in CLEAN:  # a pair check passes runs in every command
        assert all(doc is not None for doc in docs.values())


@pytest.mark.parametrize("ids,engine,version,want", CASES[::3], ids=[f"{c[1]}-{c[2]}" for c in CASES[::3]])
def test_capture_and_train_name_the_releases_layers(folders, capsys, tmp_path, ids, engine, version, want):
    drafter, target, data = str(folders["nested" if ids is NESTED else "aq"]), str(folders["target"]), \
        str(folders["data"])
    captured = _json(capsys, ["capture", "--target", target, "--data", data, "--out", str(tmp_path / "features"),
                              "--drafter", drafter, "--seq-len", "16", *_release(engine, version)])
    assert (captured["engine"], captured["engine_version"], captured["captured_layers"]) == (engine, version, want)
    assert json.loads((tmp_path / "features" / "capture.json").read_text())["aux_layers"] == want
    trained = _json(capsys, ["train", "--target", target, "--init", drafter, "--data", data, "--out",
                             str(tmp_path / "tuned"), "--max-steps", "1", "--batch-size", "2", "--seq-len", "16",
                             "--ttt-length", "2", *_release(engine, version)])
    assert (trained["engine"], trained["engine_version"], trained["captured_layers"]) == (engine, version, want)
    assert trained["aux_layers"] == want
    # the fine-tuned drafter names the layers it was trained on in the field that release reads
    assert deployment_for(target, tmp_path / "tuned", engine, version).aux.layers == want


@pytest.mark.parametrize("ids,engine,version,want", CASES, ids=[f"{c[1]}-{c[2]}" for c in CASES])
def test_assess_check_and_probe_name_the_same_layers(folders, capsys, tmp_path, ids, engine, version, want):
    drafter, target = str(folders["nested" if ids is NESTED else "aq"]), str(folders["target"])
    doc = _json(capsys, ["assess", "--drafter", drafter, "--target", target, "--prompts", str(folders["prompts"]),
                         "--out", str(tmp_path / "assess"), "--grid", "2/1/3", "--max-new-tokens", "4",
                         "--model-free", "none", "--baseline-tps", "50", "--spec-tps", "60", "--accept-length", "1.5",
                         "--device", "cpu", *_release(engine, version)])
    assert doc["check"]["engine_version"] == doc["config"]["engine_version"] == version
    assert doc["check"]["aux_layers"] == want  # what the release captures for the drafter as given
    # the probe runs on the drafter the check passed (assess's fixed copy where the release misreads the ids):
    # both name the layers of that one deployment
    checked = doc["fix"]["after"]["aux_layers"] if doc.get("fix") else doc["check"]["aux_layers"]
    probed = [p["config"]["captured_layers"] for p in doc["probes"]]
    assert probed == [checked] and doc["config"]["captured_layers"] == checked
    assert (doc.get("fix") is None) == (version in CLEAN)


def test_an_empty_engine_version_is_refused_by_every_new_option_path(folders, capsys):
    drafter, target, prompts = str(folders["nested"]), str(folders["target"]), str(folders["prompts"])
    for argv in (["probe", "--target", target, "--drafter", drafter, "--prompts", prompts],
                 ["generate", "--target", target, "--prompts", prompts, "--no-draft"],
                 ["inspect", drafter], ["plan", "--target", target, "--drafter", drafter, "--prompts", prompts]):
        assert main([*argv, "--engine-version", ""]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--engine-version is empty" in err[0], (argv, err)


def test_draft_window_is_refused_for_vllm(folders, capsys):
    code = main(["probe", "--target", str(folders["target"]), "--drafter", str(folders["nested"]), "--prompts",
                 str(folders["prompts"]), "--engine", "vllm", "--draft-window", "8"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--draft-window" in err[0]
