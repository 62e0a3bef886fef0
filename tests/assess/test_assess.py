"""``draftlab assess`` on the toy pair: the verdicts the rules must reach, and every figure equal to the
single command's on the same inputs. Costs come from a made-up GPU-like profile (tests/assess/costs.py)
so the verdicts do not hang on this machine's timing."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from costs import noisy_profile, toy_profile
from json_shapes import assert_shape
from safetensors.torch import load_file, save_file

from draftlab.cli import main

TEXTS = [("def __init__(self, name", "code"), ("import os\nimport sys\n\n", "imports"),
         ("    for key, value in self.", "code")]
GRID = "3/1/4,6/1/7,5/4/8"


def run(argv: list[str]) -> tuple[int, dict | None, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    text = out.getvalue()
    return code or 0, json.loads(text) if text.strip().startswith("{") else None, err.getvalue()


def assess(work: Path, name: str, drafter: Path, target: Path, prompts: Path, costs: Path, *extra: str) -> dict:
    code, doc, err = run(["assess", "--drafter", str(drafter), "--target", str(target), "--prompts", str(prompts),
                          "--costs", str(costs), "--batch-sizes", "1,8", "--grid", GRID, "--out", str(work / name),
                          *extra, "--json"])
    assert code == 0, err
    return doc


@pytest.fixture(scope="session")
def inputs(toy_pair, tmp_path_factory) -> dict[str, Path]:
    from draftlab.demo import perturbed_copy

    tmp = tmp_path_factory.mktemp("assess")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t, "category": c}) + "\n" for t, c in TEXTS))
    return {"tmp": tmp, "v1": toy_pair.target_dir, "v2": perturbed_copy(toy_pair.target_dir, tmp / "v2", scale=0.5),
            "drafter": toy_pair.drafter_dir, "prompts": prompts, "costs": toy_profile(tmp / "costs.json")}


@pytest.fixture(scope="session")
def drifted(inputs) -> dict:
    """The toy drafter, trained for v1, on v2 with v1 as OLD."""
    i = inputs
    return assess(i["tmp"], "drifted", i["drafter"], i["v2"], i["prompts"], i["costs"], "--old-target", str(i["v1"]),
                  "--max-new-tokens", "20")


def test_a_drifted_target_calls_for_fine_tuning_with_the_figures(drifted):
    v = drifted["verdict"]
    assert v["kind"] == "fine-tune"
    drift = next(r for r in v["reasons"] if r["rule"] == "drift" and "accept_length_old" in r["figures"])
    f = drift["figures"]
    probes = {p["config"]["steps"]: p["mean_accept_length"] for p in drifted["probes"]}
    old = {p["config"]["steps"]: p["mean_accept_length"] for p in drifted["old_probes"]}
    steps = int(f["config"].split("/")[0])
    assert (f["accept_length"], f["accept_length_old"]) == (probes[steps], old[steps])
    assert f["accept_length_old"] - f["accept_length"] > 0.2 * (f["accept_length_old"] - 1)
    moved = next(r for r in v["reasons"] if "cosine" in r["figures"])["figures"]
    assert moved["cosine"] == min(layer["cosine"] for layer in drifted["drift"]["layers"])
    assert next(r for r in v["reasons"] if r["rule"] == "vocabulary")["figures"]["coverage"] == \
        drifted["coverage"]["coverage"]
    assert v["headline"].startswith("Fine-tune")


def test_every_figure_equals_the_single_command(drifted, inputs):
    i, out = inputs, Path(drifted["files"]["assess.json"]).parent
    for key, target in (("probes", i["v2"]), ("old_probes", i["v1"])):
        for mine in drifted[key]:
            c = mine["config"]
            _, alone, err = run(["probe", "--target", str(target), "--drafter", str(i["drafter"]), "--prompts",
                                 str(i["prompts"]), "--steps", str(c["steps"]), "--topk", str(c["topk"]),
                                 "--num-draft-tokens", str(c["num_draft_tokens"]), "--max-new-tokens", "20", "--json"])
            assert alone is not None, err
            assert alone["mean_accept_length"] == mine["mean_accept_length"]
            assert [r["accept_lengths"] for r in alone["results"]] == [r["accept_lengths"] for r in mine["results"]]
    layers = ",".join(str(layer["layer"]) for layer in drifted["drift"]["layers"])
    _, alone, _ = run(["drift", "--target-a", str(i["v1"]), "--target-b", str(i["v2"]), "--prompts", str(i["prompts"]),
                       "--layers", layers, "--json"])
    assert alone["layers"] == drifted["drift"]["layers"]
    assert alone["next_token_agreement"] == drifted["drift"]["next_token_agreement"]
    _, alone, _ = run(["vocab", "coverage", str(i["drafter"]), "--counts", str(out / "vocab-counts.json"), "--json"])
    assert alone["coverage"] == drifted["coverage"]["coverage"]
    _, alone, _ = run(["plan", "--costs", str(i["costs"]), "--probe", str(out / "probe.json"), "--batch-sizes", "1,8",
                       "--json"])
    mine = {(r["label"] if "label" in r else (r["steps"], r["topk"], r["num_draft_tokens"]), r["batch_size"]):
            r["tokens_per_second"] for r in drifted["plan"]["configs"] if r["method"] == "eagle3"}
    theirs = {((r["steps"], r["topk"], r["num_draft_tokens"]), r["batch_size"]): r["tokens_per_second"]
              for r in alone["configs"]}
    assert mine == theirs



def test_the_schedule_is_plans_for_the_engine(drifted, inputs):
    """assess.json's ``schedule`` (and DIR/schedule.json) is what plan --schedule writes from the same
    profile and probe: the chains only (the model-free candidates assess adds are not a drafter's K)."""
    i, out = inputs, Path(drifted["files"]["assess.json"]).parent
    _, alone, err = run(["plan", "--costs", str(i["costs"]), "--probe", str(out / "probe.json"), "--batch-sizes", "1,8",
                         "--schedule", "sglang", "--json"])
    assert alone is not None, err
    assert drifted["schedule"] == alone["schedule"]
    assert drifted["schedule_plan"]["ranges"] == alone["schedule_plan"]["ranges"]
    assert json.loads((out / "schedule.json").read_text()) == alone["schedule"]
    assert drifted["files"]["schedule.json"] == str(out / "schedule.json")
    free = {m["method"] for m in drifted["model_free"]}
    assert free and all(k in (0, 3, 6) for _, _, k in drifted["schedule_plan"]["ranges"])

def test_slices_split_every_cycle_once(drifted):
    for probe in drifted["probes"]:
        label = f"{probe['config']['steps']}/{probe['config']['topk']}/{probe['config']['num_draft_tokens']}"
        s = drifted["slices"][label]
        assert set(s["category"]) == {"code", "imports"}
        cycles = sum(p["num_cycles"] for p in probe["results"])
        for kind in ("category", "context"):
            assert sum(x["cycles"] for x in s[kind].values()) == cycles
            mean = sum(x["accept_length"] * x["cycles"] for x in s[kind].values()) / cycles
            assert mean == pytest.approx(probe["mean_accept_length"])
        code = [r for r in probe["results"] if TEXTS[r["prompt_index"]][1] == "code"]
        lengths = [n for r in code for n in r["accept_lengths"]]
        assert s["category"]["code"]["accept_length"] == pytest.approx(sum(lengths) / len(lengths))


def test_context_slices_are_the_probes_own_buckets(drifted):
    """The page's per-context table and the probes' accept_length_by_context curves bucket alike (root positions,
    doubling buckets, probe's names): the same cycles and means per bucket."""
    from draftlab.acceptance.by_context import bucket_label

    for probe in drifted["probes"]:
        label = f"{probe['config']['steps']}/{probe['config']['topk']}/{probe['config']['num_draft_tokens']}"
        curve = {bucket_label(b): (b["cycles"], pytest.approx(b["mean_accept_length"]))
                 for b in probe["accept_length_by_context"]}
        assert len(curve) >= 2
        assert {n: (x["cycles"], x["accept_length"]) for n, x in drifted["slices"][label]["context"].items()} == curve


def test_json_shape_of_assess(drifted):
    """assess.json is assembled by hand (verdict, plan, slices): its key paths are kept (tests/json_shapes.py)."""
    assert_shape("assess", drifted)


def test_a_config_error_is_fixed_and_reported(inputs):
    i = inputs
    broken = i["tmp"] / "drafter-short-context"
    shutil.copytree(i["drafter"], broken)
    config = json.loads((broken / "config.json").read_text())
    config["max_position_embeddings"] = 64
    (broken / "config.json").write_text(json.dumps(config))
    before = (broken / "config.json").read_bytes()
    doc = assess(i["tmp"], "fixed", broken, i["v2"], i["prompts"], i["costs"], "--max-new-tokens", "20")
    assert (broken / "config.json").read_bytes() == before  # the user's drafter is untouched
    fixed_dir = Path(doc["files"]["assess.json"]).parent / "fixed"
    assert json.loads((fixed_dir / "config.json").read_text())["max_position_embeddings"] >= 2048
    assert doc["verdict"]["reasons"][0]["rule"] == "config"
    assert "context-too-short" in doc["verdict"]["reasons"][0]["figures"]["fixed"]
    assert doc["drafter"] == str(fixed_dir)
    assert doc["fix"]["after"]["ok"] and doc["probes"]


def test_a_drafter_that_never_accepts_turns_speculation_off(inputs):
    i = inputs
    noise = i["tmp"] / "drafter-noise"
    shutil.copytree(i["drafter"], noise)
    weights = load_file(str(noise / "model.safetensors"))
    gen = torch.Generator().manual_seed(0)
    weights["lm_head.weight"] = torch.randn(weights["lm_head.weight"].shape, generator=gen)
    save_file(weights, str(noise / "model.safetensors"))
    # without model-free baselines (an engine that offers none): suffix decoding pays on this text
    doc = assess(i["tmp"], "noise", noise, i["v2"], i["prompts"], i["costs"], "--max-new-tokens", "20",
                 "--model-free", "none")
    assert max(p["mean_accept_length"] for p in doc["probes"]) < 1.1
    assert doc["verdict"]["kind"] == "speculation-off"
    assert doc["verdict"]["headline"].startswith("Turn speculation off")


def test_repeating_continuations_make_ngram_win_in_the_serving_part_only(inputs):
    """The toy target falls into a loop within 128 tokens: prompt lookup then drafts it for free. The headline
    still answers about the drafter; n-gram is advised per batch size in the serving part, with why."""
    i = inputs
    doc = assess(i["tmp"], "loops", i["drafter"], i["v2"], i["prompts"], i["costs"], "--max-new-tokens", "128",
                 "--model-free", "ngram")
    ngram = doc["model_free"][0]
    assert ngram["method"] == "ngram" and ngram["mean_accept_length"] > 2
    v = doc["verdict"]
    assert v["kind"] == "serve" and "ngram" not in v["headline"]
    assert set(v["serving"]["per_batch"].values()) == {"ngram k=4"} and v["serve"] == v["serving"]["per_batch"]
    assert doc["repetition"] > 0.5  # the continuations loop ...
    assert "loop" in v["serving"]["model_free_note"]  # ... and the serving part says so
    assert all("ngram" not in r["text"] for r in v["reasons"])  # the headline's reasons are about the drafter
    page = (Path(doc["files"]["report.html"])).read_text()
    assert "Why: ngram k=4 accepts" in page and "loop" in page
    # the engine's batch-size schedule sets the drafter's K: n-gram's k=4 winning is no K of the drafter's
    # (the grid's chains are 3 and 6)
    assert {k for _, _, k in doc["schedule_plan"]["ranges"]} <= {0, 3, 6}
    _speedups_within_accept_lengths(doc)


@pytest.mark.parametrize("extra, says", [
    (["--ngram", "5,4"], "--ngram"),
    (["--model-free", "lookahead"], "--model-free"),
    (["--grid", "3/1/4:2.5"], "--grid"),
])
def test_bad_options_are_one_line(inputs, tmp_path, extra, says):
    i = inputs
    code, _, err = run(["assess", "--drafter", str(i["drafter"]), "--target", str(i["v2"]), "--prompts",
                        str(i["prompts"]), "--out", str(tmp_path / "o"), *extra])
    assert code == 2 and says in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_an_existing_out_folder_is_refused(inputs, tmp_path):
    i = inputs
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "mine.txt").write_text("keep")
    code, _, err = run(["assess", "--drafter", str(i["drafter"]), "--target", str(i["v2"]), "--prompts",
                        str(i["prompts"]), "--out", str(tmp_path / "o")])
    assert code == 2 and "already exists" in err
    assert (tmp_path / "o" / "mine.txt").read_text() == "keep"


def test_engine_numbers_that_no_accept_length_could_beat_are_system_bound(inputs):
    """The seed story: 82 tok/s plain, a cycle bound by all-reduce; even OLD's accept length loses."""
    i = inputs
    code, doc, err = run(["assess", "--drafter", str(i["drafter"]), "--target", str(i["v2"]), "--old-target",
                          str(i["v1"]), "--prompts", str(i["prompts"]), "--grid", "3/1/4", "--max-new-tokens", "20",
                          "--baseline-tps", "82", "--spec-tps", "20", "--accept-length", "1.5",
                          "--allreduce-share", "0.6", "--out", str(i["tmp"] / "engine-bound"), "--json"])
    assert code == 0, err
    v = doc["verdict"]
    assert v["kind"] == "system-bound"
    bound = next(r for r in v["reasons"] if r["rule"] == "system-bound")["figures"]
    assert bound["accept_length"] == doc["old_probes"][0]["mean_accept_length"]
    assert bound["break_even_accept_length"] == pytest.approx((1.5 * 1000 / 20) / (1000 / 82))
    assert bound["allreduce_share"] == 0.6 and doc["plan"] is None and doc["engine_estimate"]["cycle_ms"] == 75.0


def test_engine_numbers_with_room_leave_the_drift_to_fix(inputs):
    i = inputs
    code, doc, err = run(["assess", "--drafter", str(i["drafter"]), "--target", str(i["v2"]), "--old-target",
                          str(i["v1"]), "--prompts", str(i["prompts"]), "--grid", "6/1/7", "--max-new-tokens", "20",
                          "--baseline-tps", "82", "--spec-tps", "52", "--accept-length", "1.5",
                          "--out", str(i["tmp"] / "engine-drift"), "--json"])
    assert code == 0, err
    assert doc["verdict"]["kind"] == "fine-tune"
    assert doc["old_probes"][0]["mean_accept_length"] > doc["engine_estimate"]["break_even_accept_length"]


def test_engine_numbers_need_the_one_config_they_measured(inputs, tmp_path):
    i = inputs
    code, _, err = run(["assess", "--drafter", str(i["drafter"]), "--target", str(i["v2"]), "--prompts",
                        str(i["prompts"]), "--baseline-tps", "82", "--spec-tps", "52", "--accept-length", "1.5",
                        "--out", str(tmp_path / "o")])
    assert code == 2 and "exactly that config" in err and not (tmp_path / "o").exists()


def test_an_old_target_of_another_architecture_is_refused_before_anything_loads(inputs, tmp_path):
    from draftlab.checkpoint.synth import write_target
    from draftlab.demo import target_v2_config

    i = inputs
    other = write_target(tmp_path / "other", target_v2_config())
    code, _, err = run(["assess", "--drafter", str(i["drafter"]), "--target", str(i["v2"]), "--old-target",
                        str(other), "--prompts", str(i["prompts"]), "--out", str(tmp_path / "o")])
    assert code == 2 and "--old-target is the drafter's training target" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_the_served_configs_acceptance_profile_round_trips_through_plan(drifted, inputs):
    out = Path(drifted["files"]["assess.json"]).parent
    profile = json.loads((out / "speculation_profile.json").read_text())
    steps = profile["num_speculative_tokens"]
    probe = next(p for p in drifted["probes"] if p["config"]["steps"] == steps and p["config"]["topk"] == 1)
    assert profile["mean_accept_length"] == probe["mean_accept_length"]
    _, planned, err = run(["plan", "--costs", str(inputs["costs"]), "--profile", str(out / "speculation_profile.json"),
                           "--batch-sizes", "1,8", "--json"])
    assert planned is not None, err
    mine = {r["batch_size"]: r["tokens_per_second"] for r in drifted["plan"]["configs"]
            if r["method"] == "eagle3" and r["steps"] == steps and r["topk"] == 1}
    assert {r["batch_size"]: r["tokens_per_second"] for r in planned["configs"]} == mine


def _speedups_within_accept_lengths(doc: dict) -> None:
    assert doc["verdict"]["serving"]["decided"] and doc["timing"]["contradictions"] == []
    for r in doc["plan"]["configs"]:
        assert r["speedup"] <= r["accept_length"] + 1e-9 and r["break_even_accept_length"] >= 1


def test_the_toy_story_headline_is_about_the_drafter(drifted):
    """Drafter for v1 on v2, v1 as OLD: fine-tune, with both accept lengths; model-free advice only in the
    serving part (here it wins nowhere, so nowhere); every predicted speed-up within its accept length."""
    v = drifted["verdict"]
    drift = next(r for r in v["reasons"] if r["rule"] == "drift" and "accept_length_old" in r["figures"])["figures"]
    assert v["headline"].startswith("Fine-tune the drafter")
    assert f"{drift['accept_length']:.2f}" in v["headline"] and f"{drift['accept_length_old']:.2f}" in v["headline"]
    # the drift figures name the config they come from: the one that would serve at the smallest batch size
    assert drift["config"] in v["headline"] and drift["config"] == v["serving"]["per_batch"]["1"]
    assert not any(m in v["headline"] for m in ("ngram", "suffix"))
    assert all(r["rule"] != "model-free" for r in v["reasons"])
    _speedups_within_accept_lengths(drifted)


def test_contradicting_timings_give_no_speed_verdict(inputs):
    """A 1-token verify measured slower than a 5-token one (the issue's 64.5 ms against 13.2 ms)."""
    i = inputs
    noisy = noisy_profile(i["costs"], i["tmp"] / "noisy-costs.json")
    doc = assess(i["tmp"], "noisy", i["drafter"], i["v2"], i["prompts"], noisy, "--max-new-tokens", "20",
                 "--model-free", "both")
    v = doc["verdict"]
    assert v["kind"] == "speed-undecided" and v["headline"].startswith("No speed verdict")
    assert v["serve"] is None and not v["serving"]["decided"] and doc["schedule"] is None
    named = next(r for r in v["reasons"] if r["rule"] == "timing")
    assert "verify over 1 token at batch 1 takes 64.50 ms" in named["text"] and "too noisy" in named["text"]
    assert named["figures"]["contradictions"] == doc["timing"]["contradictions"]
    assert {m["method"] for m in doc["model_free"]} == {"ngram", "suffix"}  # --model-free both, as --help offers
    # with OLD the drifted drafter still needs fine-tuning: that answer rests on accept lengths alone
    doc = assess(i["tmp"], "noisy-old", i["drafter"], i["v2"], i["prompts"], noisy, "--max-new-tokens", "20",
                 "--old-target", str(i["v1"]))
    assert doc["verdict"]["kind"] == "fine-tune" and not doc["verdict"]["serving"]["decided"]


def test_ctrl_c_keeps_what_finished_and_resume_completes_it(inputs, drifted, monkeypatch):
    """Ctrl-C during OLD (after the probes): a partial assess.json saying what is missing; --resume finishes
    it with an uninterrupted run's figures."""
    import draftlab.assess.run as run_module

    i = inputs
    argv = ["assess", "--drafter", str(i["drafter"]), "--target", str(i["v2"]), "--prompts", str(i["prompts"]),
            "--costs", str(i["costs"]), "--batch-sizes", "1,8", "--grid", GRID, "--out", str(i["tmp"] / "resumed"),
            "--old-target", str(i["v1"]), "--max-new-tokens", "20", "--json"]

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(run_module, "compare_targets", interrupt)
        code, _, err = run(argv)
    assert code == 130 and "--resume" in err and "Traceback" not in err
    assert "assess: decoding the target's continuations" in err  # progress on stderr, which is no terminal here
    partial = json.loads((i["tmp"] / "resumed" / "assess.json").read_text())
    assert partial["verdict"] is None and partial["partial"] and partial["missing"] == ["old"]
    assert _figures(partial["probes"]) == _figures(drifted["probes"]) and partial["old_probes"] is None
    assert not (i["tmp"] / "resumed" / "report.html").exists()
    code, doc, err = run([*argv, "--resume"])
    assert code == 0, err
    assert doc["missing"] == [] and not doc["partial"]
    for key in ("probes", "old_probes", "model_free", "slices", "repetition"):
        assert _figures(doc[key]) == _figures(drifted[key]), key
    assert doc["drift"]["layers"] == drifted["drift"]["layers"]
    assert doc["plan"]["configs"] == drifted["plan"]["configs"]
    assert doc["verdict"] == drifted["verdict"]
    code, _, err = run([*argv, "--resume"])  # nothing left to finish
    assert code == 2 and "nothing missing" in err


def _figures(value):
    """A result without what differs between runs of the same inputs (paths of DIR, provenance, timings)."""
    if isinstance(value, dict):
        return {k: _figures(v) for k, v in value.items() if k not in ("provenance", "timings", "config")}
    if isinstance(value, list):
        return [_figures(v) for v in value]
    return value


def test_sigint_during_the_profile_keeps_the_probes(inputs, tmp_path):
    """A real Ctrl-C (SIGINT to the process) once the profile has started: exit 130, a partial assess.json
    with the probes and OLD, the profile named missing, and no page."""
    import os
    import signal
    import subprocess
    import sys

    i, out = inputs, tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "draftlab", "assess", "--drafter", str(i["drafter"]), "--target",
                             str(i["v2"]), "--old-target", str(i["v1"]), "--prompts", str(i["prompts"]), "--grid",
                             "3/1/4", "--batch-sizes", "1,8", "--max-new-tokens", "20", "--out", str(out), "--json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DRAFTLAB_THREADS": "1"})
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("assess: profiling"):
            proc.send_signal(signal.SIGINT)
            break
    err = "".join(lines) + proc.stderr.read()
    assert proc.wait(timeout=120) == 130, err
    assert "Traceback" not in err and "--resume" in err
    doc = json.loads((out / "assess.json").read_text())
    assert doc["partial"] and doc["verdict"] is None and doc["missing"] == ["profile"]
    assert doc["finished"] == ["probe", "old"] and doc["probes"] and doc["old_probes"] and doc["drift"]
    assert not (out / "report.html").exists() and (out / "continuations.jsonl").exists()


def test_a_target_without_an_mtp_head_changes_nothing(drifted):
    """The toy Llama target ships no MTP head: no candidate, no comparison, nothing said of it."""
    assert drifted["mtp"] is None and drifted["mtp_probes"] is None and drifted["mtp_note"] is None
    assert drifted["verdict"]["versus"] is None

