"""Every number and device is checked while the options are parsed: NaN, infinity, negatives, zero
counts and devices this machine does not have are one line naming the option (exit 2), before any
file is read or model loaded."""

from __future__ import annotations

import pytest

from draftlab.cli import main

T, D, P = "/nonexistent/target", "/nonexistent/drafter", "/nonexistent/p.jsonl"
PAIR = ["--target", T, "--drafter", D, "--prompts", P]

CASES = [
    (["generate", *PAIR, "--device", "mps"], "--device", "MPS"),
    (["probe", *PAIR, "--device", "cuda:3"], "--device", "cuda:3"),
    (["drift", "--target-a", T, "--target-b", T, "--prompts", P, "--device", "mps"], "--device", "MPS"),
    (["serve", "--target", T, "--device", "mps"], "--device", "MPS"),
    (["profile", "--out", "/nonexistent/p.json", "--target", T, "--device", "xpu"], "--device", "xpu"),
    (["plan", *PAIR, "--device", "cuda:1"], "--device", "cuda:1"),
    (["generate", *PAIR, "--temperature", "nan"], "--temperature nan", "finite"),
    (["generate", *PAIR, "--temperature", "inf"], "--temperature inf", "finite"),
    (["probe", *PAIR, "--temperature", "-0.5"], "--temperature -0.5", ">= 0"),
    (["regenerate", "--data", P, "--out", "/nonexistent/o.jsonl", "--temperature", "nan"], "--temperature", "finite"),
    (["bench", "--base-url", "http://127.0.0.1:9", "--prompts", P, "--timeout", "-1"], "--timeout -1", "> 0"),
    (["bench", "--base-url", "http://127.0.0.1:9", "--prompts", P, "--timeout", "inf"], "--timeout inf", "finite"),
    (["bench", "--base-url", "http://127.0.0.1:9", "--prompts", P, "--request-rate", "nan"], "--request-rate", "finite"),
    (["bench", "--base-url", "http://127.0.0.1:9", "--prompts", P, "--concurrency", "0"], "--concurrency 0", ">= 1"),
    (["sweep", "--engine", "sglang", "--target", T, "--grid", "1", "--health-timeout", "-5"], "--health-timeout", "> 0"),
    (["plan", "--baseline-tps", "inf", "--spec-tps", "5", "--accept-length", "2"], "--baseline-tps inf", "finite"),
    (["plan", "--baseline-tps", "10", "--spec-tps", "5", "--accept-length", "0.5"], "--accept-length 0.5", ">= 1"),
    (["plan", "--baseline-tps", "10", "--spec-tps", "5", "--accept-length", "2", "--allreduce-share", "1.5"],
     "--allreduce-share 1.5", "<= 1"),
    (["train", "--target", T, "--data", P, "--out", "/nonexistent/o", "--max-steps", "1", "--lr", "nan"],
     "--lr nan", "finite"),
    (["train", "--target", T, "--data", P, "--out", "/nonexistent/o", "--epochs", "-1"], "--epochs -1", "> 0"),
    (["profile", "--out", "/nonexistent/p.json", "--target", T, "--repeats", "0"], "--repeats 0", ">= 1"),
    (["generate", *PAIR, "--threads", "0"], "--threads 0", ">= 1"),
]


@pytest.mark.parametrize("argv, option, says", CASES, ids=[" ".join(c[0][:1] + c[0][-2:]) for c in CASES])
def test_bad_value_is_one_line_naming_the_option(argv, option, says, capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("draftlab: error: ") and err.count("\n") == 1, err
    assert option in err and says in err and "Traceback" not in err
