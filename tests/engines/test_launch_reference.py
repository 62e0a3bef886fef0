"""The reference server (draftlab serve) as a launch target next to SGLang and vLLM."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from draftlab.engines import ENGINES
from draftlab.engines.launch import LaunchRequest, engine_command
from draftlab.errors import DraftlabError


def test_command_runs_this_draftlab_with_the_exact_flags():
    cmd = engine_command(LaunchRequest("draftlab", "/m/t", "/m/d", 2, 2, 4, port=31002))
    assert cmd.argv == [sys.executable, "-m", "draftlab", "serve", "--target", "/m/t", "--host", "127.0.0.1",
                        "--port", "31002", "--drafter", "/m/d", "--steps", "2", "--topk", "2", "--num-draft-tokens", "4"]
    assert cmd.env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(__file__).parents[2] / "src")
    assert cmd.base_url == "http://127.0.0.1:31002" and (cmd.spec.steps, cmd.spec.topk) == (2, 2)
    baseline = engine_command(LaunchRequest("draftlab", "/m/t", port=31002))
    assert "--drafter" not in baseline.argv and baseline.spec is None
    assert "draftlab" not in ENGINES  # the aux-id conventions stay SGLang's and vLLM's


@pytest.mark.parametrize("request_,needle", [
    (LaunchRequest("draftlab", "T", "D", 3, 1, 5), "--topk 1 is a chain"),  # never silently rewritten
    (LaunchRequest("draftlab", "T", tp=2), "--tp 2: the draftlab reference server runs on one device"),
    (LaunchRequest("draftlab", "T", chunked_prefill_size=512), "--chunked-prefill-size"),
    (LaunchRequest("tgi", "T"), "choose one of sglang, vllm, draftlab"),
])
def test_refusals(request_, needle):
    with pytest.raises(DraftlabError, match=needle):
        engine_command(request_)
