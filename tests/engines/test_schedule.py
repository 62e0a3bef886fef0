"""Plan -> per-batch-size draft length, written for each engine and read back by that engine's own rules."""

from __future__ import annotations

import json

import pytest
from engine_schedule_rules import sglang_steps, trtllm_draft_len, vllm_dense
from schedule_fixtures import FALLING, RISING, plan_of

from draftlab.cost.schedule import engine_schedule, schedule_from_plan
from draftlab.engines.schedule import load_schedule
from draftlab.errors import DraftlabError


def expected_falling(b: int) -> int:
    """FALLING's choice: K 4 below batch 4, 2 below 16, 1 below 64, off from 64."""
    return 4 if b < 4 else 2 if b < 16 else 1 if b < 64 else 0


def test_best_chain_per_planned_batch_and_off_where_it_loses():
    s = schedule_from_plan(FALLING)
    assert [(r.lo, r.hi, r.draft_length, r.planned_batch) for r in s.ranges] == [
        (1, 3, 4, 1), (4, 15, 2, 4), (16, 63, 1, 16), (64, 64, 0, 64)]
    assert s.ranges[-1].tokens_per_second == s.ranges[-1].baseline_tokens_per_second == 6400.0
    assert s.ranges[0].speedup == pytest.approx(1.99)
    assert "3/4/8" in s.notes[0]  # the tree that would win at batch 1 is not a chain length
    assert schedule_from_plan(FALLING, max_batch_size=256).ranges[-1].hi == 256


def test_vllm_reads_it_as_planned():
    w = engine_schedule(FALLING, "vllm", "0.24.0", max_batch_size=128)
    config = json.loads(json.dumps(w.value))  # as it travels inside --speculative-config
    assert set(config) == {"num_speculative_tokens", "num_speculative_tokens_per_batch_size"}
    assert config["num_speculative_tokens"] == 4
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 15, 2], [16, 63, 1], [64, 128, 0]]
    dense = vllm_dense(config["num_speculative_tokens_per_batch_size"], 256, config["num_speculative_tokens"])
    assert dense[1:] == [expected_falling(b) for b in range(1, 257)]  # the explicit 0 holds past the last range
    assert [w.draft_length(b) for b in range(1, 257)] == dense[1:]


def test_sglang_reads_it_as_planned():
    w = engine_schedule(FALLING, "sglang", "0.5.15")
    config = json.loads(json.dumps(w.value))
    assert config == {"1": {"candidate_steps": [4]}, "4": {"candidate_steps": [2]}, "16": {"candidate_steps": [1]},
                      "64": {"candidate_steps": [0]}}
    graphs = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 128]
    for b in range(1, 200):
        assert sglang_steps(config, b, num_steps=4) == expected_falling(b) == w.draft_length(b)
        # CUDA graphs: SGLang routes the batch padded up to the next graph size (the note says so)
        padded = next((g for g in graphs if g >= b), b)
        assert sglang_steps(config, b, num_steps=4, cuda_graph_bs=graphs) == expected_falling(padded)
    assert any("padded size" in n for n in w.notes)


def test_trtllm_reads_it_as_planned_and_switches_off_above_the_last_key():
    w = engine_schedule(FALLING, "trtllm", max_batch_size=100)
    config = json.loads(json.dumps(w.value))
    assert config == {"max_draft_len": 4, "draft_len_schedule": {"3": 4, "15": 2, "63": 1, "100": 0}}
    for b in range(1, 150):
        assert trtllm_draft_len(config, b) == expected_falling(b) == w.draft_length(b)


def test_trtllm_caps_every_range_at_batch_1s_draft_length():
    assert [r.draft_length for r in schedule_from_plan(RISING).ranges] == [2, 4]
    for engine in ("vllm", "sglang"):
        assert engine_schedule(RISING, engine).max_draft_length == 4
    w = engine_schedule(RISING, "trtllm")
    assert w.value == {"max_draft_len": 2, "draft_len_schedule": {"8": 2}}  # batch 8's best K up to 2, merged
    assert [trtllm_draft_len(w.value, b) for b in range(1, 10)] == [2] * 8 + [0]
    assert "capped" in " ".join(w.notes)


@pytest.mark.parametrize("engine, version, words", [
    ("vllm", "0.23.0", "vLLM 0.23.0 takes no per-batch-size draft length (it arrived in vLLM 0.24.0)"),
    ("sglang", "0.5.12", "SGLang 0.5.12 takes no per-batch-size draft length (it arrived in SGLang 0.5.13)"),
    ("sglang", "0.5.13", "steps 0 needs SGLang 0.5.14+"),
    ("trtllm", "1.2.1", "not a TensorRT-LLM release draftlab knows"),
    ("tgi", None, "choose one of sglang, vllm, trtllm"),
])
def test_release_without_the_feature_is_refused(engine, version, words):
    with pytest.raises(DraftlabError) as err:
        engine_schedule(FALLING, engine, version)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_sglang_0_5_13_takes_a_schedule_without_zeros():
    w = engine_schedule(plan_of({1: {3: 200.0}, 8: {1: 900.0}}), "sglang", "0.5.13")
    assert w.value == {"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]}}


def test_nothing_to_write_when_speculation_always_loses():
    with pytest.raises(DraftlabError, match="speculation loses at every planned batch size"):
        engine_schedule(plan_of({1: {1: 90.0}, 8: {1: 700.0}}), "vllm")
    with pytest.raises(DraftlabError, match="speculation loses at batch 1"):
        engine_schedule(plan_of({1: {1: 90.0}, 8: {1: 900.0}}), "trtllm")
    with pytest.raises(DraftlabError, match="no chain configs"):
        engine_schedule(plan_of({1: {}}, trees={1: 300.0}), "vllm")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_file_round_trip(tmp_path, engine):
    w = engine_schedule(FALLING, engine, max_batch_size=64)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(w.value))
    loaded = load_schedule(path)
    assert loaded.engine == engine and loaded.max_draft_length == 4
    assert [loaded.draft_length(b) for b in range(1, 65)] == [expected_falling(b) for b in range(1, 65)]


@pytest.mark.parametrize("text, words", [
    ('{"num_speculative_tokens_per_batch_size": [[2, 8, 3]]}', "not a valid vLLM schedule"),
    ('{"1": {"candidate_steps": [1, 3]}}', "several candidate_steps"),
    ('{"max_draft_len": 2, "draft_len_schedule": {"4": 3}}', "not a valid TensorRT-LLM schedule"),
    ('{"1": {"candidate_steps": [0]}}', "switches speculation off at every batch size"),
    ('[1, 2]', "not a schedule"),
    ("{", "not a readable JSON file"),
])
def test_bad_schedule_file_is_one_line(tmp_path, text, words):
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(DraftlabError) as err:
        load_schedule(path)
    assert words in str(err.value) and "\n" not in str(err.value)
