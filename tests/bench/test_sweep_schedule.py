"""``sweep --schedule --predicted``: the schedule benched at every batch of the grid beside fixed K, with
the plan's prediction next to each measurement."""

from __future__ import annotations

import json
import socket

import pytest

from draftlab.bench.grid import parse_grid
from draftlab.bench.predicted import load_predictions
from draftlab.bench.sweep import SweepOptions, plan_sweep, run_sweep
from draftlab.cli import main
from draftlab.engines.schedule import load_schedule
from draftlab.errors import DraftlabError

SCHEDULE = {"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 4, 0]]}
TEXTS = ["def __init__(self, name", "import os\nimport sys\n\n", "    for key, value in self."]


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.fixture
def files(tmp_path):
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(SCHEDULE))
    plan = tmp_path / "plan.json"  # what draftlab plan --json writes, the keys a sweep reads
    plan.write_text(json.dumps({
        "baseline_tokens_per_second": {"1": 50.0, "2": 90.0},
        "configs": [{"steps": 3, "topk": 1, "num_draft_tokens": 4, "batch_size": b, "tokens_per_second": t}
                    for b, t in ((1, 80.0), (2, 85.0))]}))
    return schedule, plan


def test_dry_run_adds_a_schedule_entry_per_batch_and_batches_every_arm(capsys, files):
    schedule, _ = files
    code = main(["sweep", "--engine", "draftlab", "--target", "T", "--drafter", "D", "--grid",
                 "1,0,0,0 1,3,1,4 2,3,1,4", "--schedule", str(schedule), "--dry-run", "--json"])
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert code == 0
    assert [(e["config"], e["batch"]) for e in entries] == [
        ("baseline", 1), ("3/1/4", 1), ("3/1/4", 2), ("schedule", 1), ("schedule", 2)]
    assert all(_flag(e["argv"], "--max-batch") == "48" for e in entries)
    assert [_flag(e["argv"], "--schedule") for e in entries] == [None] * 3 + [str(schedule.resolve())] * 2
    assert _flag(entries[-1]["argv"], "--steps") == "3"


def test_schedule_for_an_engine_release_that_cannot_read_it(files):
    sglang = files[0].parent / "sglang.json"
    sglang.write_text(json.dumps({"1": {"candidate_steps": [3]}}))
    with pytest.raises(DraftlabError, match="is a SGLang schedule; write one for vLLM"):
        plan_sweep(SweepOptions("vllm", "T", "D", tuple(parse_grid("1,3,1,4")), schedule=load_schedule(sglang)))


def test_bad_plan_file_is_one_line(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"configs": []}')
    with pytest.raises(DraftlabError, match="not a plan"):
        load_predictions(path)


def test_real_sweep_with_schedule_and_predictions(toy_pair, tmp_path, files):
    """On the toy pair: at batch 1 the schedule drafts 3 (the 3/1/4 arm's accept length), at batch 2 (both
    requests in one batch) it drafts nothing (one token per step); each row carries the plan's tok/s."""
    schedule, plan = files
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in TEXTS))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = SweepOptions("draftlab", str(toy_pair.target_dir), str(toy_pair.drafter_dir),
                           tuple(parse_grid("1,3,1,4 2,0,0,0")), prompts, num_prompts=2, max_tokens=12, warmup=0,
                           port=port,
                           health_timeout_s=120, ignore_eos=True, schedule=load_schedule(schedule),
                           predicted=load_predictions(plan))
    result = run_sweep(plan_sweep(options), tmp_path / "out")
    rows = {(r.config, r.batch): r for r in result.rows}
    assert all(r.error is None for r in result.rows), [r.error for r in result.rows]
    fixed, scheduled1, scheduled2 = rows[("3/1/4", 1)], rows[("schedule", 1)], rows[("schedule", 2)]
    assert fixed.accept_length > 1.5 and scheduled1.accept_length == pytest.approx(fixed.accept_length)
    assert scheduled2.accept_length == 1.0  # no step drafted, so none accepted
    assert (fixed.predicted_throughput, scheduled1.predicted_throughput, scheduled2.predicted_throughput,
            rows[("baseline", 2)].predicted_throughput) == (80.0, 80.0, 90.0, 90.0)
    assert fixed.prediction_error == pytest.approx(fixed.output_throughput / 80.0 - 1)


def test_schedule_and_synthetic_acceptance_are_refused_together(files):
    from draftlab.acceptance.synthetic import parse_synthetic

    options = SweepOptions("draftlab", "T", "D", tuple(parse_grid("1,3,1,4")), schedule=load_schedule(files[0]),
                           synthetic=parse_synthetic("2.5"))
    with pytest.raises(DraftlabError, match="--schedule and --synthetic-acceptance do not go together"):
        plan_sweep(options)
