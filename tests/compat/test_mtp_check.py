"""``check mtp --target T``, ``inspect T`` and ``launch ENGINE --target T --drafter mtp`` on the command line: exit
codes, JSON and the pre-launch check (headers-only targets from tests/mtp_targets.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mtp_targets import mtp_target

from draftlab.checkpoint.configs import TargetConfig
from draftlab.checkpoint.synth import specforge_drafter_config, write_drafter
from draftlab.cli import main
from draftlab.compat import check_pair


@pytest.fixture(scope="module")
def targets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mtp-cli")
    return {"qwen3_5": mtp_target(root / "qwen3_5", "qwen3_5"), "llama": mtp_target(root / "llama", "llama"),
            "deepseek-2": mtp_target(root / "deepseek-2", "deepseek", count=2, stored=2)}


def test_check_mtp_exit_codes_and_json(targets, capsys):
    assert main(["check", "mtp", "--target", str(targets["qwen3_5"]), "--engine", "vllm", "--engine-version", "0.20.0",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["engine"], doc["engine_version"], doc["drafter"]) == ("vllm", "0.20.0", "mtp")
    assert [f["code"] for f in doc["findings"]] == ["mtp-served"] and doc["deployment"]["captured_layers"] is None
    assert main(["check", "mtp", "--target", str(targets["deepseek-2"]), "--engine", "sglang"]) == 1
    out = capsys.readouterr().out
    assert "mtp-unserved" in out and "own MTP layers" in out
    assert main(["check", "mtp", "--target", str(targets["llama"])]) == 1
    assert main(["check", "mtp", "--target", str(targets["qwen3_5"]), "--fix", "out"]) == 2
    assert "--fix" in capsys.readouterr().err


def test_inspect_json_names_the_mtp_layers(targets, capsys):
    assert main(["inspect", str(targets["qwen3_5"]), "--json"]) == 0
    mtp = json.loads(capsys.readouterr().out)["mtp"]
    assert (mtp["layout"], mtp["prefix"], mtp["num_layers"]) == ("qwen3_next", "mtp.", 1)
    assert main(["inspect", str(targets["qwen3_5"])]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "MTP layers" in out and "mtp_num_hidden_layers" in out


def _drafter_for(target: Path, folder: Path) -> Path:
    config = json.loads((target / "config.json").read_text())
    return write_drafter(folder, specforge_drafter_config(TargetConfig.from_dict(config),
                                                          draft_vocab_size=config["vocab_size"]))


def test_inspect_on_a_pair_names_the_targets_mtp_layers(targets, tmp_path, capsys):
    drafter = _drafter_for(targets["deepseek-2"], tmp_path / "drafter")
    assert main(["inspect", str(drafter), "--target", str(targets["deepseek-2"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "drafter" and doc["target_mtp"]["stored_layers"] == 2
    assert main(["inspect", str(drafter), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["target_mtp"] is None


def test_launch_dry_run_writes_the_flags_and_checks_first(targets, capsys):
    target = str(targets["qwen3_5"])
    assert main(["launch", "sglang", "--target", target, "--drafter", "mtp", "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    argv = doc["argv"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "NEXTN"
    assert argv[argv.index("--speculative-draft-model-path") + 1] == target
    assert any(note.startswith("check mtp (sglang 0.5.23") for note in doc["notes"])
    assert main(["launch", "vllm", "--target", target, "--drafter", "mtp", "--steps", "2", "--dry-run"]) == 0
    assert '"method": "mtp"' in capsys.readouterr().out
    # a target whose MTP layers the release does not serve is refused before anything starts
    assert main(["launch", "sglang", "--target", str(targets["deepseek-2"]), "--drafter", "mtp", "--dry-run"]) == 2
    assert "mtp-unserved" in capsys.readouterr().err
    assert main(["launch", "vllm", "--target", str(targets["llama"]), "--drafter", "mtp", "--steps", "2",
                 "--dry-run"]) == 2


def test_a_drafters_check_names_the_mtp_alternative_where_the_release_serves_it(targets, tmp_path):
    def codes(target: str, engine: str) -> list[str]:
        drafter = _drafter_for(targets[target], tmp_path / f"{target}-{engine}")
        return [f.code for f in check_pair(drafter, targets[target], engine).findings]

    assert "mtp-available" in codes("qwen3_5", "sglang") and "mtp-available" in codes("qwen3_5", "vllm")
    assert "mtp-available" in codes("deepseek-2", "vllm")
    assert "mtp-available" not in codes("deepseek-2", "sglang")  # SGLang serves exactly one MTP layer
    assert "mtp-available" not in codes("llama", "sglang")
