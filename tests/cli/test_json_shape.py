"""The documents the cheap commands print with --json keep every key path recorded in tests/json_shapes.json
(assess's, from its own fixture, in tests/assess/test_assess.py). See tests/json_shapes.py."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from json_shapes import assert_shape

from draftlab.cli import main

CHAIN = ["--steps", "3", "--topk", "1", "--num-draft-tokens", "4"]
TIMING = ["--device", "cpu", "--warmup", "0", "--repeats", "1", "--context", "8", "--batch-sizes", "1"]


def printed(argv: list[str]) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--json"])
    assert (code or 0) == 0, err.getvalue()
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def files(toy_pair, mtp_toy, tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("shapes")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in ("import os\n", "def __init__(self")))
    return {"tmp": tmp, "target": toy_pair.target_dir, "drafter": toy_pair.drafter_dir, "prompts": prompts,
            "mtp": mtp_toy.target_dir}


def test_json_shape_of_inspect_and_check(files):
    t, d = str(files["target"]), str(files["drafter"])
    assert_shape("inspect drafter", printed(["inspect", d]))
    assert_shape("inspect target (MTP layers)", printed(["inspect", str(files["mtp"])]))
    assert_shape("check", printed(["check", d, "--target", t, "--engine", "vllm"]))
    assert_shape("check mtp", printed(["check", "mtp", "--target", str(files["mtp"])]))


def test_json_shape_of_generate_probe_profile_and_plan(files):
    pair = ["--target", str(files["target"]), "--drafter", str(files["drafter"])]
    given = [*pair, "--prompts", str(files["prompts"]), "--max-new-tokens", "12", *CHAIN]
    assert_shape("generate", printed(["generate", *given]))
    probe = printed(["probe", *given])
    assert_shape("probe", probe)
    (files["tmp"] / "probe.json").write_text(json.dumps(probe))
    costs = files["tmp"] / "profile.json"
    assert_shape("profile", printed(["profile", *pair, *TIMING, "--verify-tokens", "1,4", "--draft-rows", "1",
                                     "--extend-tokens", "1,4", "--out", str(costs)]))
    assert_shape("plan", printed(["plan", "--costs", str(costs), "--probe", str(files["tmp"] / "probe.json"),
                                  "--schedule", "vllm"]))
