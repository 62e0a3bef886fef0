"""A pair ``check`` rejects is refused by every command that would run it, in one line, before any weight is
loaded (issue 42): the toy MLA drafter on the toy Llama target (its MLA dimensions fit no Llama target: check's
error), through probe, generate, drift, train --init and capture."""

from __future__ import annotations

import pytest

from draftlab.cli import main
from draftlab.compat import check_pair
from draftlab.models.target import TargetRunner
from draftlab.toy.mla import cached_mla_toy


@pytest.fixture(scope="module")
def mismatched(toy_pair) -> tuple[str, str]:
    """(target, drafter): an MLA drafter trained for a DeepSeek-V3 target, given the Llama toy target."""
    return str(toy_pair.target_dir), str(cached_mla_toy().drafter_dir)


def test_check_rejects_the_pair(mismatched):
    target, drafter = mismatched
    assert any(f.severity == "error" for f in check_pair(drafter, target).findings)


COMMANDS = {
    "probe": lambda t, d, p, tmp: ["probe", "--target", t, "--drafter", d, "--prompts", p, "--max-new-tokens", "4"],
    "generate": lambda t, d, p, tmp: ["generate", "--target", t, "--drafter", d, "--prompts", p,
                                      "--max-new-tokens", "4"],
    "drift": lambda t, d, p, tmp: ["drift", "--target-a", t, "--target-b", t, "--prompts", p, "--drafter", d],
    "train --init": lambda t, d, p, tmp: ["train", "--target", t, "--init", d, "--data", p, "--out",
                                          str(tmp / "out")],
    "capture": lambda t, d, p, tmp: ["capture", "--target", t, "--drafter", d, "--data", p, "--out",
                                     str(tmp / "out")],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_refused_in_one_line_before_any_weight_loads(command, mismatched, tmp_path, capsys, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the target's weights were loaded before the pair was refused")

    monkeypatch.setattr(TargetRunner, "load", no_loading)
    target, drafter = mismatched
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "def f(x):", "text": "def f(x):\\n    return x\\n"}\n')
    code = main(COMMANDS[command](target, drafter, str(prompts), tmp_path))
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("draftlab: error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert "would not run this drafter" in errors[0] and drafter in errors[0], errors[0]
    assert not (tmp_path / "out").exists()
