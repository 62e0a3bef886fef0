"""``launch --schedule``: the schedule reaches each engine the way its release reads it."""

from __future__ import annotations

import json
import shlex

import pytest
from engine_schedule_rules import sglang_steps, vllm_dense
from schedule_fixtures import FALLING

from draftlab.cli import main
from draftlab.cost.schedule import engine_schedule
from draftlab.engines.launch import LaunchRequest, engine_command
from draftlab.engines.schedule import load_schedule
from draftlab.errors import DraftlabError


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.fixture
def files(tmp_path):
    out = {}
    for engine in ("vllm", "sglang", "trtllm"):
        path = tmp_path / f"{engine}.json"
        path.write_text(json.dumps(engine_schedule(FALLING, engine, max_batch_size=64).value))
        out[engine] = path
    return out


def test_vllm_gets_it_inside_speculative_config(files):
    cmd = engine_command(LaunchRequest("vllm", "T", "D", schedule=load_schedule(files["vllm"])))
    config = json.loads(_flag(cmd.argv, "--speculative-config"))
    assert config["method"] == "eagle3" and config["model"] == "D"
    top = config["num_speculative_tokens"]
    assert top == 4
    dense = vllm_dense(config["num_speculative_tokens_per_batch_size"], 48, top)  # --max-num-seqs 48
    assert dense[1:] == [4] * 3 + [2] * 12 + [1] * 33
    assert any("inside --speculative-config" in n for n in cmd.notes)


def test_sglang_gets_the_adaptive_flags_and_file(files):
    cmd = engine_command(LaunchRequest("sglang", "T", "D", schedule=load_schedule(files["sglang"])))
    argv = cmd.argv
    assert "--speculative-adaptive" in argv
    path = _flag(argv, "--speculative-adaptive-config")
    assert path == str(files["sglang"].resolve())
    steps = int(_flag(argv, "--speculative-num-steps"))
    assert (steps, _flag(argv, "--speculative-eagle-topk"), _flag(argv, "--speculative-num-draft-tokens")) == (
        4, "1", "5")
    config = json.loads(open(path).read())
    assert [sglang_steps(config, b, steps) for b in (1, 3, 4, 15, 16, 63, 64, 200)] == [4, 4, 2, 2, 1, 1, 0, 0]


def test_reference_server_gets_the_file(files):
    cmd = engine_command(LaunchRequest("draftlab", "T", "D", schedule=load_schedule(files["trtllm"])))
    assert _flag(cmd.argv, "--schedule") == str(files["trtllm"].resolve())
    assert _flag(cmd.argv, "--steps") == "4" and _flag(cmd.argv, "--topk") == "1"


@pytest.mark.parametrize("engine, kwargs, words", [
    ("vllm", {"steps": 2}, "--steps 2 is below the schedule's largest draft length 4"),
    ("sglang", {"topk": 4}, "--topk 4: a batch-size schedule drafts chains"),
    ("sglang", {"steps": 5}, "one of the schedule's candidate steps (0, 1, 2, 4)"),
    ("vllm", {"drafter": None}, "needs --drafter"),
])
def test_flags_that_contradict_the_schedule(files, engine, kwargs, words):
    request = LaunchRequest(engine, "T", **{"drafter": "D", **kwargs}, schedule=load_schedule(files[engine]))
    with pytest.raises(DraftlabError) as err:
        engine_command(request)
    assert words in str(err.value)


def test_schedule_for_another_engine_is_refused(files):
    with pytest.raises(DraftlabError, match="is a SGLang schedule; write one for vLLM"):
        engine_command(LaunchRequest("vllm", "T", "D", schedule=load_schedule(files["sglang"])))


@pytest.mark.parametrize("engine, version, words", [
    ("vllm", "0.23.0", "vLLM 0.23.0 takes no per-batch-size draft length"),
    ("sglang", "0.5.12", "SGLang 0.5.12 takes no per-batch-size draft length"),
    ("sglang", "0.5.13", "steps 0 needs 0.5.14+"),
])
def test_launch_refuses_a_release_without_it(capsys, files, engine, version, words):
    code = main(["launch", engine, "--target", "T", "--drafter", "D", "--schedule", str(files[engine]),
                 "--engine-version", version, "--skip-check", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1


def test_launch_dry_run_json(capsys, files):
    assert main(["launch", "vllm", "--target", "T", "--drafter", "D", "--schedule", str(files["vllm"]),
                 "--engine-version", "0.24.0", "--skip-check", "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    argv = shlex.split(doc["shell"])
    config = json.loads(_flag(argv, "--speculative-config"))
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 15, 2], [16, 63, 1], [64, 64, 0]]
