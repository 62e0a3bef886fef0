"""``plan --target --drafter --prompts`` on the trained toy pair: the probe's exact accept lengths, a
profile that covers every grid config, the JSON contract, one-line errors."""

from __future__ import annotations

import json

import pytest

from draftlab.cli import main
from draftlab.cost.auto_plan import auto_plan, default_grid, profile_sizes
from draftlab.cost.model import SpecConfig
from draftlab.cost.plan import GridEntry, make_plan
from draftlab.cost.probes import AcceptLength
from draftlab.cost.profile import ModelInfo, Profile
from draftlab.cost.timing import Measurement
from draftlab.probe.probe import probe

TEXTS = ["def __init__(self, ", "import os\nimport sys\n\n", "    for i in range(len("]
GRID = ["1/1/2", "3/1/4", "2/2/4"]
FAST = ["--max-new-tokens", "24", "--context", "32", "--repeats", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in TEXTS))
    return path


def pair_args(toy_pair, prompts):
    return ["--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir), "--prompts", str(prompts)]


def test_accept_lengths_are_the_probes(toy_pair, prompts):
    configs = [SpecConfig.parse(c) for c in GRID]
    result = auto_plan(toy_pair.target_dir, toy_pair.drafter_dir, prompts, grid=configs, max_new_tokens=24,
                       context_tokens=32, device="cpu", warmup=0, repeats=1, progress=False)
    assert [(r.steps, r.topk, r.num_draft_tokens) for r in result.plan.configs] == \
        [(c.steps, c.topk, c.num_draft_tokens) for c in configs]
    for config, row, probed in zip(configs, result.plan.configs, result.probes):
        alone = probe(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=config.steps, topk=config.topk,
                      num_draft_tokens=config.num_draft_tokens, max_new_tokens=24)
        assert row.accept_length == alone.mean_accept_length
        assert [r.accept_lengths for r in probed.results] == [r.accept_lengths for r in alone.results]
        assert 1.2 < row.accept_length < config.steps + 1  # real, non-trivial acceptance
    # the grid's sizes, plus those of the overhead's calibration configs 1/1/2, 4/1/5 and 4/4/8
    verify = {m.tokens for m in result.profile.verify}
    assert verify == {1, 2, 4, 5, 8} and {m.tokens for m in result.profile.draft_extend} == {1, 2, 3, 4, 5}
    assert [o.batch_size for o in result.profile.overhead] == [1]


def test_temperature_plans_with_the_probes_estimates(toy_pair, prompts, capsys):
    configs = [SpecConfig.parse(c) for c in GRID[1:]]
    result = auto_plan(toy_pair.target_dir, toy_pair.drafter_dir, prompts, grid=configs, max_new_tokens=24,
                       context_tokens=32, device="cpu", warmup=0, repeats=1, temperature=0.7, seed=3,
                       progress=False)
    greedy = [probe(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=c.steps, topk=c.topk,
                    num_draft_tokens=c.num_draft_tokens, max_new_tokens=24).mean_accept_length for c in configs]
    for config, row, probed, exact in zip(configs, result.plan.configs, result.probes, greedy):
        alone = probe(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=config.steps, topk=config.topk,
                      num_draft_tokens=config.num_draft_tokens, max_new_tokens=24, temperature=0.7, seed=3)
        assert probed.estimate and probed.config["temperature"] == 0.7
        assert row.accept_length == pytest.approx(alone.mean_accept_length, rel=1e-5)
        assert 1.2 < row.accept_length < exact  # sampling accepts less than greedy decoding on this pair
    code = main(["plan", *pair_args(toy_pair, prompts), *FAST, "--grid", "3/1/4", "--temperature", "0.7",
                 "--seed", "3", "--json"])
    assert code == 0
    planned = json.loads(capsys.readouterr().out)["configs"][0]["accept_length"]
    assert planned == pytest.approx(result.plan.configs[0].accept_length, rel=1e-5)


def test_profile_sizes_cover_every_default_config():
    """A profile measured at exactly profile_sizes() lets make_plan price every config of the
    default grid at its lowest and highest possible accept length."""
    grid = default_grid()
    assert len(set(grid)) == len(grid) and any(c.topk == 1 for c in grid) and any(c.topk > 1 for c in grid)
    verify, rows, extend = profile_sizes(grid)
    assert verify == [1, 2, 3, 4, 5, 6, 7, 8, 32] and rows == [1, 4, 8] and extend == [1, 2, 3, 4, 5, 6, 7]

    def points(sizes):
        return [Measurement(1, t, **dict.fromkeys(("median_ms", "p10_ms", "p90_ms", "min_ms", "max_ms"), 1.0 + t), repeats=1) for t in sizes]

    profile = Profile(ModelInfo(), verify=points(verify), draft_step=points(rows), draft_extend=points(extend))
    for pick in (lambda c: 1.0, lambda c: float(c.steps + 1)):
        plan = make_plan(profile, [AcceptLength(c, pick(c), "test") for c in grid],
                         grid=[GridEntry(c) for c in grid])
        assert len(plan.configs) == len(grid)


def test_cli_json_contract_and_saved_measurements_replan(toy_pair, prompts, tmp_path, capsys):
    costs, probes, png = tmp_path / "costs.json", tmp_path / "probe.json", tmp_path / "plan.png"
    code = main(["plan", *pair_args(toy_pair, prompts), "--grid", ",".join(GRID), "--batch-sizes", "1,2", *FAST,
                 "--json", "--save-costs", str(costs), "--save-probe", str(probes), "--plot", str(png)])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert set(doc["baseline_tokens_per_second"]) == {"1", "2"} and set(doc["best"]) == {"1", "2"}
    keys = {"steps", "topk", "num_draft_tokens", "batch_size", "accept_length", "cycle_ms", "tokens_per_second",
            "speedup", "break_even_accept_length"}
    assert len(doc["configs"]) == 2 * len(GRID) and all(keys <= set(row) for row in doc["configs"])
    for b in (1, 2):
        rows = [r for r in doc["configs"] if r["batch_size"] == b]
        assert [f"{r['steps']}/{r['topk']}/{r['num_draft_tokens']}" for r in rows] == GRID
        assert doc["best"][str(b)]["tokens_per_second"] == max(r["tokens_per_second"] for r in rows)
    accept = [r["accept_length"] for r in doc["configs"]]
    assert accept[:len(GRID)] == accept[len(GRID):]  # greedy acceptance does not depend on the batch
    assert png.read_bytes()[:4] == b"\x89PNG"

    assert main(["plan", "--costs", str(costs), "--probe", str(probes), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [r["accept_length"] for r in again["configs"]] == [r["accept_length"] for r in doc["configs"]]
    assert [r["cycle_ms"] for r in again["configs"]] == [r["cycle_ms"] for r in doc["configs"]]


def test_cli_table_and_verdict(toy_pair, prompts, capsys):
    assert main(["plan", *pair_args(toy_pair, prompts), "--grid", "3/1/4", *FAST]) == 0
    out = capsys.readouterr().out
    assert "1 config probed on 3 prompts" in out and "3/1/4 *" in out
    assert "At batch 1, 3/1/4 is best" in out or "Speculation loses at batch 1" in out


@pytest.mark.parametrize("extra, words", [
    (["--prompts", "missing.jsonl"], "prompts file not found"),
    (["--costs", "p.json"], "drop --costs, --probe and --profile"),
    (["--spec-tps", "52"], "drop --spec-tps"),
    (["--grid", "3/1/5"], "pass --num-draft-tokens 4"),
    (["--grid", "3/1/4:2.5"], "drop ':2.5'"),
    (["--batch-sizes", "0"], "--batch-sizes '0': values must be positive"),
])
def test_bad_input_exits_2_with_one_line(toy_pair, prompts, capsys, extra, words):
    args = pair_args(toy_pair, prompts)
    if extra[0] == "--prompts":
        args = args[:4]
    code = main(["plan", *args, *extra, "--json"])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert out.err.startswith("draftlab: error:") and words in out.err and out.err.count("\n") == 1


@pytest.mark.parametrize("argv, words", [
    (["--target", "t", "--prompts", "p.jsonl"], "add --drafter"),
    (["--costs", "p.json", "--max-new-tokens", "8"], "--max-new-tokens goes with --target"),
])
def test_mode_mixups_exit_2(capsys, argv, words):
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
