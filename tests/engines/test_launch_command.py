"""The exact engine command lines, for a table of flag combinations (incl. SGLang rewrites/rejects)."""

from __future__ import annotations

import json

import pytest

from draftlab.engines.launch import SGLANG_CONTEXT_ENV, LaunchRequest, engine_command
from draftlab.errors import DraftlabError


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


# (steps, topk, num_draft_tokens) -> what SGLang runs (steps, topk, ndt) and whether it rewrote
SGLANG_TABLE = [
    ((3, 1, 4), (3, 1, 4), False),
    ((2, 1, 3), (2, 1, 3), False),  # a chain of 2 drafts, not 6
    ((5, 4, 8), (5, 4, 8), False),
    ((2, 2, 4), (2, 2, 4), False),
    ((1, 4, 5), (1, 4, 5), False),  # pool = topk = 4 -> at most 5
    ((3, 1, 8), (3, 1, 4), True),  # topk 1 forces steps + 1
    ((6, 1, 2), (6, 1, 7), True),
    ((3, 1, None), (3, 1, 4), False),  # SGLang completes a chain without num_draft_tokens (source "rewritten")
]


@pytest.mark.parametrize("given,expected,rewritten", SGLANG_TABLE)
def test_sglang_speculative_flags(given, expected, rewritten):
    s, k, n = given
    cmd = engine_command(LaunchRequest("sglang", "/m/target", "/m/drafter", s, k, n, tp=2, port=31000))
    argv = cmd.argv
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    assert _flag(argv, "--model-path") == "/m/target"
    assert _flag(argv, "--speculative-algorithm") == "EAGLE3"
    assert _flag(argv, "--speculative-draft-model-path") == "/m/drafter"
    got = tuple(int(_flag(argv, f)) for f in ("--speculative-num-steps", "--speculative-eagle-topk",
                                              "--speculative-num-draft-tokens"))
    assert got == expected
    assert _flag(argv, "--tp") == "2" and _flag(argv, "--port") == "31000"
    assert any("SGLang rule" in n for n in cmd.notes) == rewritten
    assert any("rewritten" in n for n in cmd.notes) == (n is None)
    assert cmd.env == {}


@pytest.mark.parametrize("given,needle", [
    ((3, None, 4), "--topk"),  # all three or none
    ((None, 1, None), "--steps"),
    ((1, 2, 4), "offers only 2"),  # ndt - 1 = 3 > topk + (steps-1) topk^2 = 2
    ((2, 2, 8), "offers only 6"),
    ((0, 1, 1), "positive"),
    ((3, 2, None), "--num-draft-tokens"),  # only a chain is completed
    ((3, 40, 1025), "at most 1024"),  # SGLang's tree kernel
])
def test_sglang_rejections(given, needle):
    with pytest.raises(DraftlabError, match=needle):
        engine_command(LaunchRequest("sglang", "T", "D", *given))


def test_sglang_auto_flags_written_out_for_the_architecture():
    cmd = engine_command(LaunchRequest("sglang", "T", "D", target_architecture="LlamaForCausalLM"))
    assert [_flag(cmd.argv, f) for f in ("--speculative-num-steps", "--speculative-eagle-topk",
                                         "--speculative-num-draft-tokens")] == ["5", "4", "8"]
    cmd = engine_command(LaunchRequest("sglang", "T", "D", target_architecture="Qwen3ForCausalLM"))
    assert _flag(cmd.argv, "--speculative-eagle-topk") == "1"


def test_fairness_settings_identical_on_both_sglang_arms():
    base = engine_command(LaunchRequest("sglang", "T", chunked_prefill_size=4096))
    spec = engine_command(LaunchRequest("sglang", "T", "D", 3, 1, 4, chunked_prefill_size=4096))
    for argv in (base.argv, spec.argv):
        assert _flag(argv, "--max-running-requests") == "48"
        assert "--disable-overlap-schedule" in argv
        assert _flag(argv, "--chunked-prefill-size") == "4096"
        assert "--enable-mixed-chunk" not in argv
    assert "--speculative-algorithm" not in base.argv
    assert spec.argv[: len(base.argv)] == base.argv  # the speculative arm only adds speculation


def test_context_override_only_when_check_says_so():
    assert SGLANG_CONTEXT_ENV not in engine_command(LaunchRequest("sglang", "T", "D", 3, 1, 4)).env
    cmd = engine_command(LaunchRequest("sglang", "T", "D", 3, 1, 4), context_too_short=True)
    assert cmd.env == {SGLANG_CONTEXT_ENV: "1"}
    assert cmd.shell.startswith(f"{SGLANG_CONTEXT_ENV}=1 ")
    # the baseline never loads the drafter: no override there
    assert engine_command(LaunchRequest("sglang", "T"), context_too_short=True).env == {}


@pytest.mark.parametrize("steps,ndt", [(3, None), (3, 4), (1, 2), (7, None)])
def test_vllm_chain(steps, ndt):
    cmd = engine_command(LaunchRequest("vllm", "/m/t", "/m/d", steps, 1, ndt, tp=4, port=8100,
                                       max_running_requests=64))
    assert cmd.argv[:3] == ["vllm", "serve", "/m/t"]
    assert json.loads(_flag(cmd.argv, "--speculative-config")) == {
        "method": "eagle3", "model": "/m/d", "num_speculative_tokens": steps}
    assert _flag(cmd.argv, "--tensor-parallel-size") == "4"
    assert _flag(cmd.argv, "--max-num-seqs") == "64"
    assert cmd.base_url == "http://127.0.0.1:8100"


@pytest.mark.parametrize("steps,topk,ndt,needle", [
    (3, 4, 8, "chain"),  # trees are refused, not silently flattened
    (3, 1, 8, "steps \\+ 1 = 4"),
    (None, None, None, "needs --steps"),
])
def test_vllm_rejections(steps, topk, ndt, needle):
    with pytest.raises(DraftlabError, match=needle):
        engine_command(LaunchRequest("vllm", "T", "D", steps, topk, ndt))


def test_vllm_baseline_and_extra_args_pass_through():
    cmd = engine_command(LaunchRequest("vllm", "T", extra_args=("--dtype", "bfloat16")))
    assert "--speculative-config" not in cmd.argv
    assert cmd.argv[-2:] == ["--dtype", "bfloat16"]


def test_spec_flags_without_drafter_refused():
    with pytest.raises(DraftlabError, match="need --drafter"):
        engine_command(LaunchRequest("sglang", "T", steps=3, topk=1, num_draft_tokens=4))


def test_a_check_error_that_check_fix_cannot_fix_is_not_sent_to_check_fix(tmp_path, target_configs):
    """num-layers (two decoder layers in SGLang) is no config edit: launch names its own fix instead."""
    from builders import make_pair

    from draftlab.compat.prelaunch import check_before_launch

    drafter, target = make_pair(tmp_path, target_configs["llama"], num_hidden_layers=2)
    with pytest.raises(DraftlabError) as info:
        check_before_launch(LaunchRequest("sglang", str(target), str(drafter)))
    message = str(info.value)
    assert "num-layers" in message and "check --fix OUT" not in message
    assert "draftlab check --fix cannot fix num-layers" in message
    fixable, _ = make_pair(tmp_path / "fixable", target_configs["llama"], architectures=["NotADrafter"])
    with pytest.raises(DraftlabError, match="architecture-unknown .*run draftlab check --fix OUT and launch OUT"):
        check_before_launch(LaunchRequest("sglang", str(target), str(fixable)))
