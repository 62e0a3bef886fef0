"""Bad input to ``draftlab generate``: one line on stderr, exit 2, nothing on stdout, no model loaded."""

import json

import pytest

from draftlab.checkpoint.configs import TargetConfig
from draftlab.checkpoint.synth import write_drafter, write_target
from draftlab.cli import main
from draftlab.compat import fix_pair
from draftlab.demo import reused_drafter_config, target_v2_config


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The demo's synthetic pair: a drafter that SGLang would load wrongly (vLLM aux ids, 2048 context)."""
    root = tmp_path_factory.mktemp("pair")
    target = write_target(root / "target", target_v2_config())
    drafter = write_drafter(root / "drafter", reused_drafter_config(TargetConfig.from_dict(target_v2_config())),
                            layer_prefix="layers.0.")
    prompts = root / "ok.jsonl"
    prompts.write_text(json.dumps({"input_ids": [3, 4, 5]}) + "\n")
    return target, drafter, prompts


@pytest.fixture(scope="module")
def fixed(pair, tmp_path_factory):
    """The same pair with the drafter as ``check --fix`` writes it: clean, so the inputs are what is refused."""
    target, drafter, prompts = pair
    out = tmp_path_factory.mktemp("fixed") / "drafter"
    fix_pair(drafter, target, out)
    return target, out, prompts


def _cli(args, capsys):
    code = main(["generate", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_refused(result, message):
    code, out, err = result
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--steps", "3", "--topk", "1", "--num-draft-tokens", "8"], "SGLang warns and sets --num-draft-tokens to"),
     (["--steps", "2", "--topk", "2", "--num-draft-tokens", "9"], "offers only 6"),
     (["--steps", "3"], "all three"),
     (["--steps", "0", "--topk", "1", "--num-draft-tokens", "1"], "--steps 0: must be a whole number >= 1")],
)
def test_flags_sglang_would_change_or_reject(fixed, capsys, flags, message):
    target, drafter, prompts = fixed
    _assert_refused(_cli(["--target", str(target), "--drafter", str(drafter), "--prompts", str(prompts), *flags],
                         capsys), message)


def test_incompatible_drafter_is_refused_with_the_check_findings(pair, capsys):
    target, drafter, prompts = pair
    result = _cli(["--target", str(target), "--drafter", str(drafter), "--prompts", str(prompts)], capsys)
    _assert_refused(result, "aux-convention")
    assert "would not run this drafter" in result[2] and "2 more error(s)" in result[2]


def test_bad_prompts_and_missing_drafter(fixed, tmp_path, capsys):
    target, drafter, _ = fixed
    base = ["--target", str(target), "--drafter", str(drafter)]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    long_prompt = tmp_path / "long.jsonl"
    long_prompt.write_text(json.dumps({"input_ids": [7] * 9000}) + "\n")
    cases = [([*base, "--prompts", str(empty)], "no prompts"),
             ([*base, "--prompts", str(long_prompt)], "long.jsonl:1: the prompt has 9000 tokens but the target's context is 8192"),
             ([*base, "--prompts", str(tmp_path / "missing.jsonl")], "not found"),
             (["--target", str(target), "--prompts", str(empty)], "--no-draft"),
             ([*base, "--prompts", str(empty), "--engine", "trt"], "unknown engine"),
             ([*base, "--prompts", str(empty), "--max-new-tokens", "0"], "--max-new-tokens 0: must be a whole number >= 1")]
    for args, message in cases:
        _assert_refused(_cli(args, capsys), message)
