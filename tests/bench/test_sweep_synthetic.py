"""``sweep --synthetic-acceptance`` on draftlab serve (toy pair) and ``bench --synthetic-acceptance``: the runs are
forced, and every result says so and what was asked."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from draftlab.acceptance.synthetic import parse_synthetic
from draftlab.bench.grid import parse_grid
from draftlab.bench.result import load_result
from draftlab.bench.sweep import SUMMARY_NAME, SweepOptions, plan_sweep, run_sweep
from draftlab.cli import main

sys.path.insert(0, str(Path(__file__).parents[1] / "serve"))

from pair_server import build_context, start  # noqa: E402

TEXTS = ["def __init__(self, name", "import os\nimport sys\n\n", "    for key, value in self."]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sweep_forces_every_speculative_entry_and_records_it(toy_pair, tmp_path):
    """AL 4 with 3 drafts accepts every draft: the measured accept length is exactly 4 through launch, serve,
    /generate and bench (a real toy run accepts about 2.4), and the baseline entry is left alone."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in TEXTS))
    options = SweepOptions("draftlab", str(toy_pair.target_dir), str(toy_pair.drafter_dir),
                           tuple(parse_grid("1,0,0,0 1,3,1,4")), prompts, max_tokens=24, warmup=0,
                           port=_free_port(), health_timeout_s=120, synthetic=parse_synthetic("4"))
    plan = plan_sweep(options)
    assert "--synthetic-acceptance" not in plan.entries[0].command.argv
    assert plan.entries[1].command.argv[-2:] == ["--synthetic-acceptance", "4"]
    result = run_sweep(plan, tmp_path / "out")
    base, spec = result.rows
    assert base.error is None and spec.error is None
    assert spec.accept_length == 4.0 and spec.synthetic_accept_length == 4.0 and base.synthetic_accept_length is None
    summary = json.loads((Path(result.out_dir) / SUMMARY_NAME).read_text())
    assert summary["synthetic_acceptance"]["synthetic"] and summary["synthetic_acceptance"]["requested"] == "4"
    bench = load_result(Path(result.out_dir) / spec.result_file)
    assert bench.config["synthetic_acceptance"]["accept_length"] == 4.0
    assert bench.config["synthetic_acceptance"]["marginal_accept_rates"] == [1.0, 1.0, 1.0]
    assert load_result(Path(result.out_dir) / base.result_file).config["synthetic_acceptance"] is None


def test_bench_records_the_requested_acceptance(tmp_path, capsys):
    profile = tmp_path / "speculation_profile.json"
    profile.write_text(json.dumps({"schema_version": "1.0", "num_speculative_tokens": 2, "mean_accept_length": 2.2,
                                   "marginal_accept_rates": [0.8, 0.4]}))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"input_ids": [1, 2, 3]}\n')
    ctx = build_context(drafted=True)
    server, url = start(ctx)
    try:
        code = main(["bench", "--base-url", url, "--api", "sglang", "--prompts", str(prompts), "--warmup", "0",
                     "--synthetic-acceptance", str(profile), "-o", str(tmp_path / "r.json")])
    finally:
        server.shutdown()
        ctx.engine.close()
    assert code == 0
    config = json.loads((tmp_path / "r.json").read_text())["config"]
    assert config["synthetic_acceptance"]["synthetic"] is True
    assert config["synthetic_acceptance"]["requested_marginal_accept_rates"] == [0.8, 0.4]
    assert config["synthetic_acceptance"]["profile"] == str(profile)
    capsys.readouterr()
    assert main(["bench", "--base-url", "http://127.0.0.1:9", "--prompts", str(prompts), "--synthetic-acceptance",
                 "0.5"]) == 2
    assert "finite number >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["-o", "--output"])
def test_bench_output_may_not_be_the_profile(tmp_path, capsys, option):
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({"schema_version": "1.0", "num_speculative_tokens": 1, "mean_accept_length": 1.5,
                                   "marginal_accept_rates": [0.5]}))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello"}\n')
    before = profile.read_bytes()
    assert main(["bench", "--base-url", "http://127.0.0.1:9", "--prompts", str(prompts), "--synthetic-acceptance",
                 str(profile), option, str(profile)]) == 2
    assert profile.read_bytes() == before and "itself" in capsys.readouterr().err
