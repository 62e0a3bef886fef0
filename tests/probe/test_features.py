"""probe --features: hidden states captured elsewhere give the live probe's accept lengths."""

import json

import pytest
import torch
from safetensors.torch import save_file

from draftlab.cli import main
from draftlab.models.target import TargetRunner
from draftlab.probe.probe import probe
from draftlab.toy.pair import AUX_LAYERS

TEXTS = ["def __init__(self, ", "import os\nimport sys\n\n"]
FLAGS = dict(steps=3, topk=2, num_draft_tokens=5)


@pytest.fixture(scope="module")
def captured(toy_pair, tmp_path_factory):
    """Greedy responses of the toy target, its aux features and final states, and a given-responses file."""
    root = tmp_path_factory.mktemp("features")
    runner = TargetRunner.load(toy_pair.target_dir, aux_layers=AUX_LAYERS)
    rows = []
    for text in TEXTS:
        ids = list(text.encode())
        runner.reset()
        out = []
        for _ in range(40):
            step = runner.forward(torch.tensor(ids + out if not out else out[-1:]))
            out.append(int(step.logits[-1].argmax()))
        rows.append((ids, out, runner.forward_batch(torch.tensor([ids + out]))))
    given = root / "given.jsonl"
    given.write_text("".join(json.dumps({"input_ids": p, "response_ids": r}) + "\n" for p, r, _ in rows))
    return root, given, rows


def test_specforge_files_equal_the_live_probe(toy_pair, captured):
    root, given, rows = captured
    folder = root / "specforge" / "rows_0-5000"
    folder.mkdir(parents=True)
    for i, (p, r, step) in enumerate(rows):
        torch.save({"input_ids": torch.tensor(p + r), "loss_mask": torch.tensor([0] * len(p) + [1] * len(r)),
                    "hidden_state": step.hidden, "aux_hidden_state": step.aux}, folder / f"data_{i}.ckpt")
    live = probe(toy_pair.target_dir, toy_pair.drafter_dir, given, responses="given", max_new_tokens=30, **FLAGS)
    offline = probe(toy_pair.target_dir, toy_pair.drafter_dir, features=root / "specforge", max_new_tokens=30, **FLAGS)
    assert [r.accept_lengths for r in offline.results] == [r.accept_lengths for r in live.results]
    assert live.mean_accept_length > 1.5
    assert offline.target_disagreement == 0.0  # the final states give the target's argmax
    assert offline.config["responses"] == "features"


def test_speculators_safetensors_without_loss_mask_walk_from_the_first_token(toy_pair, captured, tmp_path):
    root, _, rows = captured
    folder = tmp_path / "hs"
    folder.mkdir()
    width = 64
    for i, (p, r, step) in enumerate(rows):
        layers = list(step.aux[0].split(width, dim=-1)) + [step.hidden[0]]
        save_file({"token_ids": torch.tensor(p + r), "hidden_states": torch.stack(layers, dim=1).contiguous()},
                  str(folder / f"hs_{i}.safetensors"))
    one_token = tmp_path / "one.jsonl"
    one_token.write_text("".join(json.dumps({"input_ids": (p + r)[:1], "response_ids": (p + r)[1:]}) + "\n"
                                 for p, r, _ in rows))
    live = probe(toy_pair.target_dir, toy_pair.drafter_dir, one_token, responses="given", max_new_tokens=80, **FLAGS)
    offline = probe(toy_pair.target_dir, toy_pair.drafter_dir, features=folder, max_new_tokens=80, **FLAGS)
    assert [r.accept_lengths for r in offline.results] == [r.accept_lengths for r in live.results]
    assert offline.mean_accept_length > 1.5  # drafts are accepted, so the equality covers the walk
    assert offline.target_disagreement == live.target_disagreement > 0  # the prompt text is not target output


@pytest.mark.parametrize("problem", ["width", "layers"])
def test_features_that_do_not_fit_the_drafter_exit_2(toy_pair, captured, tmp_path, capsys, problem):
    _, _, rows = captured
    p, r, step = rows[0]
    layers = list(step.aux[0].split(64, dim=-1))
    if problem == "width":
        layers = [torch.cat([t, t[:, :1]], dim=-1) for t in layers]
    else:
        layers = layers[:2]
    torch.save({"input_ids": torch.tensor(p + r), "hidden_states": layers}, tmp_path / "data_0.pt")
    code = main(["probe", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                 "--features", str(tmp_path), "--steps", "3", "--topk", "1", "--num-draft-tokens", "4"])
    assert code == 2
    err = capsys.readouterr().err
    assert "data_0.pt" in err and ("width 65" in err if problem == "width" else "2 captured layers" in err)
