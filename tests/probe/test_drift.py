"""drift of the toy target against itself and against perturbed copies of its weights."""

import json
import math
import shutil

import pytest

from draftlab.cli import main
from draftlab.demo import perturbed_copy
from draftlab.probe.drift import drift

TEXTS = ["def __init__(self, ", "import os\nimport sys\n\n", "    return self._"]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("p") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in TEXTS))
    return path


def test_target_against_itself_is_perfect(toy_pair, prompts):
    r = drift(toy_pair.target_dir, toy_pair.target_dir, prompts)
    assert [m.layer for m in r.layers] == [0, 1, 2, 3]  # every layer without a drafter
    for m in r.layers:
        assert math.isclose(m.cosine, 1.0, abs_tol=1e-6) and m.relative_l2 == 0.0
        assert math.isclose(m.cka, 1.0, abs_tol=1e-6)
    assert r.next_token_agreement == 1.0 and abs(r.kl) < 1e-9
    assert r.num_positions == sum(len(t.encode()) for t in TEXTS)


def test_more_perturbation_drifts_further(toy_pair, prompts, tmp_path):
    small = drift(toy_pair.target_dir, perturbed_copy(toy_pair.target_dir, tmp_path / "small", 0.05), prompts)
    large = drift(toy_pair.target_dir, perturbed_copy(toy_pair.target_dir, tmp_path / "large", 0.6), prompts)
    assert small.layers[0].relative_l2 == 0.0  # layer 0 was not touched
    for s, big in zip(small.layers[1:], large.layers[1:]):
        assert 0 < s.relative_l2 < big.relative_l2
        assert big.cosine < s.cosine < 1
        assert big.cka < 1
    assert large.kl > small.kl > 0
    assert large.next_token_agreement < 1


def test_drift_json_with_drafter_uses_its_aux_layers(toy_pair, prompts, tmp_path, capsys):
    b = perturbed_copy(toy_pair.target_dir, tmp_path / "b", 0.6)
    code = main(["drift", "--target-a", str(toy_pair.target_dir), "--target-b", str(b), "--prompts", str(prompts),
                 "--drafter", str(toy_pair.drafter_dir), "--max-new-tokens", "24", "--steps", "3", "--topk", "1",
                 "--num-draft-tokens", "4", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert [m["layer"] for m in doc["layers"]] == [0, 1, 2]  # the toy drafter's aux layers
    assert set(doc["layers"][0]) == {"layer", "cosine", "relative_l2", "cka"}
    assert doc["accept_length_a"] > doc["accept_length_b"] >= 1
    assert 0 <= doc["next_token_agreement"] < 1 and doc["kl"] > 0


def test_drift_refuses_mismatched_targets_and_bad_layers(toy_pair, prompts, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(toy_pair.target_dir, other)
    config = json.loads((other / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (other / "config.json").write_text(json.dumps(config))
    base = ["drift", "--target-a", str(toy_pair.target_dir), "--prompts", str(prompts)]
    assert main(base + ["--target-b", str(other)]) == 2
    assert "num_layers is 3" in capsys.readouterr().err
    assert main(base + ["--target-b", str(toy_pair.target_dir), "--layers", "1,9"]) == 2
    assert "layer 9 does not exist" in capsys.readouterr().err
