"""A speculators drafter whose aux ids were lost (speculators' converter writes null) and --fix --aux-layers."""

from __future__ import annotations

import json

import pytest
from builders import DROP, as_speculators, make_pair

from draftlab.cli import main
from draftlab.compat import check_pair, fix_pair
from draftlab.errors import DraftlabError

TRAINED = [2, 16, 29]  # what the drafter was trained on; the engines' default for 32 layers is [1, 15, 28]


@pytest.fixture
def lost_ids(tmp_path, target_configs):
    """A 32-layer target and a speculators-layout drafter with eagle_aux_hidden_state_layer_ids null."""
    deep = {**target_configs["llama"], "num_hidden_layers": 32}
    drafter, target = make_pair(tmp_path, deep, layer_prefix="layers.0.", eagle_config=DROP,
                                eagle_aux_hidden_state_layer_ids=None)
    return as_speculators(drafter), target


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_lost_aux_ids_are_a_warning_naming_the_converter_and_the_default(lost_ids, engine):
    drafter, target = lost_ids
    found = {f.code: f for f in check_pair(drafter, target, engine).findings}
    warning = found["aux-unset"]
    assert warning.severity == "warning" and "aux-default" not in found
    assert "speculators convert --algorithm eagle3" in warning.message and "[1, 15, 28]" in warning.message
    assert "--aux-layers" in warning.fix


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fix_aux_layers_writes_them_for_every_engine_that_reads_the_folder(tmp_path, lost_ids, engine, capsys):
    drafter, target = lost_ids
    out = tmp_path / "fixed"
    code = main(["check", str(drafter), "-t", str(target), "-e", engine, "--fix", str(out), "--aux-layers",
                 ",".join(map(str, TRAINED)), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["after"]["aux_layers"] == TRAINED
    assert not {"aux-unset", "aux-default"} & {f["code"] for f in doc["after"]["findings"]}
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == [3, 17, 30]  # vLLM's input-of-layer convention
    if engine == "sglang":  # flattened: SGLang's field too, canonical
        assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == TRAINED
        assert check_pair(out, target, "vllm").aux_layers == TRAINED


@pytest.mark.parametrize("layers, why", [("2,16,31", "outside 0..30"), ("2,16", "takes 192 inputs"),
                                         ("2,2,29", "twice"), ("29,16,2", "ascending"), ("2;16", "comma-separated")])
def test_bad_aux_layers_are_refused_in_one_line(tmp_path, lost_ids, layers, why, capsys):
    drafter, target = lost_ids
    assert main(["check", str(drafter), "-t", str(target), "--fix", str(tmp_path / "o"), "--aux-layers", layers]) == 2
    err = capsys.readouterr().err.strip()
    assert why in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_aux_layers_needs_fix(lost_ids, capsys):
    drafter, target = lost_ids
    assert main(["check", str(drafter), "-t", str(target), "--aux-layers", "2,16,29"]) == 2
    assert "--fix" in capsys.readouterr().err


def test_library_refuses_like_the_cli(tmp_path, lost_ids):
    drafter, target = lost_ids
    with pytest.raises(DraftlabError, match="outside"):
        fix_pair(drafter, target, tmp_path / "o", "vllm", aux_layers=[40, 41, 42])
