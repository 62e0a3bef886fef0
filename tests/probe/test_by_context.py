"""Acceptance by context: the probe's mean accept length per bucket of cycle start positions, on long
toy prompts; the buckets' cycles are the probe's, a bucket past the drafter's limits is marked, and the
terminal, the probe's page section and assess's page show it."""

from __future__ import annotations

import json
import shutil

import pytest

from draftlab.acceptance.by_context import accept_length_by_context, bucket_label, first_width
from draftlab.cli import main
from draftlab.probe.walk import cycle_roots, decoder_walk
from draftlab.report.html.assess import assess_section
from draftlab.report.html.by_context import assess_curves, context_parts
from draftlab.report.html.decode import probe_section
from draftlab.toy.corpus import stdlib_text

LENGTHS = (40, 300, 700, 1100, 1500, 1900)  # bytes of held-out text per prompt: positions up to ~2k
FLAGS = ["--steps", "3", "--topk", "1", "--num-draft-tokens", "4", "--max-new-tokens", "48", "--batch-size", "2"]


@pytest.fixture(scope="module")
def long_prompts(tmp_path_factory):
    """Prompts of 40 to 1900 bytes of held-out stdlib source, each cut at line ends."""
    text, rows = stdlib_text("heldout", 40_000), []
    for i, n in enumerate(LENGTHS):
        start = text.index(b"\n", 5000 * i) + 1
        rows.append({"input_ids": list(text[start:text.index(b"\n", start + n) + 1])})
    path = tmp_path_factory.mktemp("long") / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _probe_json(capsys, target, drafter, prompts) -> dict:
    assert main(["probe", "--target", str(target), "--drafter", str(drafter), "--prompts", str(prompts), *FLAGS,
                 "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_buckets_double_from_a_width_the_longest_context_chooses():
    assert first_width(20_000) == 1024 and first_width(4096) == 1024  # < 1k, 1-2k, 2-4k, 4-8k, ...
    assert first_width(1900) == 256 and first_width(600) == 128 and first_width(3) == 16
    cycles = [(10, 1), (300, 2), (300, 4), (1030, 3), (5000, 1)]
    got = accept_length_by_context(cycles, limits={"max_position_embeddings": 4096, "sliding_window": None})
    assert [(b["from"], b["to"], b["cycles"]) for b in got] == [(0, 1024, 3), (1024, 2048, 1), (4096, 8192, 1)]
    assert [bucket_label(b) for b in got] == ["< 1k", "1k-2k", "4k-8k"] and got[0]["mean_accept_length"] == 7 / 3
    assert [b["past"] for b in got] == [[], [], ["max_position_embeddings"]]
    fine = accept_length_by_context(cycles[:3], limits={"sliding_window": 256})
    assert [(b["from"], b["to"], b["mean_accept_length"], b["past"]) for b in fine] == [
        (0, 64, 1.0, []), (256, 512, 3.0, ["sliding_window"])]
    assert accept_length_by_context([], limits={}) == []


def test_cycle_roots_follow_the_decoder_walk():
    accepted = [0, 2, 1, 3, 0, 0, 3, 1, 2, 0, 0, 1, 0, 0, 0, 0]
    lengths = decoder_walk(accepted, list(range(20)), 3, 12, steps=3, eos=set(), context=None)
    roots = cycle_roots(3, lengths)
    assert roots[0] == 3 and all(accepted[r - 1] + 1 == n for r, n in zip(roots, lengths))
    assert all(b - a == n for a, b, n in zip(roots, roots[1:], lengths))


def test_probe_json_on_long_prompts_sums_to_its_cycles_and_shows_everywhere(toy_pair, long_prompts, capsys):
    doc = _probe_json(capsys, toy_pair.target_dir, toy_pair.drafter_dir, long_prompts)
    buckets = doc["accept_length_by_context"]
    lengths = [n for r in doc["results"] for n in r["accept_lengths"]]
    assert len(buckets) >= 3 and len(set(lengths)) > 1  # several buckets, acceptance that varies
    assert sum(b["cycles"] for b in buckets) == len(lengths) == sum(r["num_cycles"] for r in doc["results"])
    weighted = sum(b["cycles"] * b["mean_accept_length"] for b in buckets) / len(lengths)
    assert weighted == pytest.approx(doc["mean_accept_length"])
    assert [b["from"] for b in buckets] == sorted(b["from"] for b in buckets) and buckets[-1]["to"] >= 1024
    assert all(b["past"] == [] for b in buckets)  # the toy drafter's context is 2048, no window

    section = probe_section(doc)
    assert section.figures == 2 and any('data-figure="accept-by-context"' in part for part in section.body)
    assert any("Accept length (cycles) by cycle position" in part for part in section.body)
    assessed = {"verdict": {"headline": "h", "reasons": []}, "probes": [doc], "old_probes": [doc]}
    assert [label for label, _ in assess_curves(assessed)] == ["3/1/4", "3/1/4 on OLD"]
    page = "".join(assess_section(assessed).body)  # assess's page: every probe's curve, this target's and OLD's
    assert 'data-figure="accept-by-context"' in page and "3/1/4 on OLD" in page
    assert context_parts(assess_curves({"probes": [{**doc, "accept_length_by_context": []}]})) == []

    assert main(["probe", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                 "--prompts", str(long_prompts), *FLAGS]) == 0
    assert "accept length by context" in capsys.readouterr().out


def test_buckets_past_the_drafters_context_are_marked(toy_pair, long_prompts, tmp_path, capsys):
    drafter = shutil.copytree(toy_pair.drafter_dir, tmp_path / "short-drafter")
    config = json.loads((drafter / "config.json").read_text())
    (drafter / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 512}))
    doc = _probe_json(capsys, toy_pair.target_dir, drafter, long_prompts)
    marked = [b for b in doc["accept_length_by_context"] if b["past"]]
    assert marked and all(b["to"] > 512 and b["past"] == ["max_position_embeddings"] for b in marked)
    assert all(b["to"] <= 512 for b in doc["accept_length_by_context"] if not b["past"])
    assert any(" past" in part for part in context_parts([("3/1/4", doc["accept_length_by_context"])]))


@pytest.fixture(scope="module")
def windowed_drafter(toy_pair, tmp_path_factory):
    """The toy drafter's weights with a 64-token sliding window (the length it was trained on), as
    speculators writes the window: shorter than every long prompt but the first."""
    drafter = shutil.copytree(toy_pair.drafter_dir, tmp_path_factory.mktemp("windowed") / "drafter")
    config = json.loads((drafter / "config.json").read_text())
    config.update({"layer_types": ["sliding_attention"], "sliding_window": 64, "use_sliding_window": True})
    (drafter / "config.json").write_text(json.dumps(config))
    return drafter


def test_a_sliding_window_drafter_and_its_full_attention_twin_give_different_curves(
        toy_pair, windowed_drafter, long_prompts, capsys):
    run = ["probe", "--target", str(toy_pair.target_dir), "--prompts", str(long_prompts), *FLAGS, "--json"]
    curves = {}
    for name, drafter, engine in (("windowed", windowed_drafter, ["--engine", "vllm"]),
                                  ("full", toy_pair.drafter_dir, ["--engine", "vllm"]),
                                  ("sglang", windowed_drafter, []),  # SGLang without the flag: no window
                                  ("sglang-flag", windowed_drafter, ["--draft-window", "64"])):
        assert main([*run, "--drafter", str(drafter), *engine]) == 0
        doc = json.loads(capsys.readouterr().out)
        curves[name] = doc["accept_length_by_context"]
        assert sum(b["cycles"] for b in curves[name]) == sum(r["num_cycles"] for r in doc["results"])
    spans = [(b["from"], b["to"]) for b in curves["full"]]
    assert len(spans) >= 3 and [(b["from"], b["to"]) for b in curves["windowed"]] == spans
    assert [b["mean_accept_length"] for b in curves["windowed"]] != [b["mean_accept_length"] for b in curves["full"]]
    assert curves["sglang"] == [{**b, "past": ["sliding_window"]} for b in curves["full"]]  # the full function
    assert curves["sglang-flag"] == curves["windowed"]  # the server flag gives vLLM's windowed function
    assert all(b["past"] == ["sliding_window"] for b in curves["windowed"])  # every bucket reaches past 64
    assert all(b["past"] == [] for b in curves["full"])


def test_probe_computes_the_window_each_engine_serves_as_generate_does(toy_pair, windowed_drafter, long_prompts):
    from draftlab.decode.generate import generate
    from draftlab.models.pair import deployment_for
    from draftlab.probe.probe import probe

    for engine in ("sglang", "vllm"):
        deployment = deployment_for(toy_pair.target_dir, windowed_drafter, engine)
        flags = {"steps": 3, "topk": 1, "num_draft_tokens": 4, "max_new_tokens": 24, "deployment": deployment}
        ref = generate(toy_pair.target_dir, windowed_drafter, long_prompts, **flags)
        got = probe(toy_pair.target_dir, windowed_drafter, long_prompts, batch_size=2, **flags)
        assert [r.accept_lengths for r in got.results] == [r.accept_lengths for r in ref.results]
        assert got.config["draft_windows"] == [None if engine == "sglang" else 64]
