"""Profiling the reference runtime (tiny random Llama target and EAGLE-3 drafter, CPU)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import transformers as tf

from draftlab.checkpoint import DrafterConfig
from draftlab.cost.model import SpecConfig
from draftlab.cost.overhead import CALIBRATION, LONG, SHORT, TREE, CycleSample
from draftlab.cost.plan import make_plan, parse_grid
from draftlab.cost.profile import CostTable
from draftlab.cost.profiler import profile_costs
from draftlab.cost.runtime_workload import runtime_workload
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner

SHAPE = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256}


@pytest.fixture(scope="module")
def pair() -> tuple[TargetRunner, Eagle3Drafter]:
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(
        tf.LlamaConfig(num_hidden_layers=4, **SHAPE), dtype=torch.float32)
    target = TargetRunner(model)
    config = DrafterConfig.from_dict({"architectures": ["LlamaForCausalLMEagle3"],
                                      "num_hidden_layers": 1, "draft_vocab_size": 64, **SHAPE})
    drafter = Eagle3Drafter(config, embed_tokens=target.embed_tokens).eval()
    return target, drafter


def test_profile_reference_runtime(pair):
    target, drafter = pair
    workload = runtime_workload(target, drafter, context_tokens=16, target_name="tiny")
    prof = profile_costs(workload, batch_sizes=[1], verify_tokens=[1, 4], draft_rows=[1, 2],
                         extend_tokens=[1, 2, 3, 4], warmup=1, repeats=2, measure_overhead=False, progress=False)
    assert [m.tokens for m in prof.verify] == [1, 4] and prof.overhead == []
    assert [m.tokens for m in prof.draft_step] == [1, 2]
    assert prof.model.hidden_size == 32 and prof.model.num_layers == 4
    # each timed pass is undone, so the caches stay at the context length
    assert target.cache_len == 16 and drafter.cache_len == 16
    plan = make_plan(prof, [], grid=parse_grid("3/1/4:2.5,2/2/3:1.8"))
    assert set(plan.best) == {1} and all(r.cycle_ms > 0 for r in plan.configs)


def test_profile_batched_passes(pair):
    """Batch > 1 times the batched decoder's passes; every pass gets a point per batch size."""
    target, drafter = pair
    workload = runtime_workload(target, drafter, context_tokens=8)
    prof = profile_costs(workload, batch_sizes=[1, 3], verify_tokens=[1, 4], draft_rows=[2],
                         extend_tokens=[1, 3], warmup=1, repeats=2, progress=False)
    for section in (prof.verify, prof.draft_step, prof.draft_extend):
        assert sorted({m.batch_size for m in section}) == [1, 3]
    assert prof.batch_sizes == [1, 3]
    plan = make_plan(prof, [], grid=parse_grid("3/2/4:2.0"))
    assert set(plan.best) == {1, 3}
    assert plan.baseline_tokens_per_second[3] > 0


def test_overhead_of_real_cycles(pair):
    """With a drafter, the decoder's real cycles are timed at every batch size and the passes
    subtracted; the calibration configs' sizes are measured for that."""
    target, drafter = pair
    workload = runtime_workload(target, drafter, context_tokens=8)
    sample = workload.cycles(2, SpecConfig(4, 1, 5))
    assert sample.ms_per_cycle > 0 and 1 <= sample.accept_length <= 5
    timed: dict[tuple[int, SpecConfig | None], CycleSample] = {}

    def recorded(batch_size: int, config: SpecConfig | None) -> CycleSample:
        timed[batch_size, config] = workload.cycles(batch_size, config)
        return timed[batch_size, config]

    prof = profile_costs(replace(workload, cycles=recorded), batch_sizes=[1, 2], verify_tokens=[1], draft_rows=[1],
                         extend_tokens=[1], warmup=0, repeats=1, progress=False)
    assert [o.batch_size for o in prof.overhead] == [1, 2]
    assert {m.tokens for m in prof.verify} == {1, 2, 5, 8} and {m.tokens for m in prof.draft_extend} == set(range(1, 6))
    assert {m.tokens for m in prof.draft_step} == {1, 4}  # rows of the calibration chains and tree
    assert set(timed) == {(b, c) for b in (1, 2) for c in (None, *CALIBRATION)}

    # What the overhead is for: the profile's predicted cycle (measured passes plus fitted overhead)
    # reproduces each real cycle it was calibrated on. Where timing noise made a part negative it
    # counts as zero, which can only raise the prediction, so then it is an upper bound.
    table = CostTable.of(prof)
    for o in prof.overhead:
        b = o.batch_size
        real = timed[b, None].ms_per_cycle
        predicted = table.decode_ms(b)
        if o.decode_ms > 0:
            assert predicted == pytest.approx(real, rel=1e-6, abs=1e-9), (b, "decode")
        else:
            assert predicted >= real * (1 - 1e-9), (b, "decode")
        parts = {SHORT: (o.cycle_ms,), LONG: (o.cycle_ms, o.draft_step_ms),
                 TREE: (o.cycle_ms, o.draft_step_ms, o.tree_ms)}
        for config in CALIBRATION:
            real = timed[b, config]
            predicted = table.cycle(b, config, real.accept_length).total_ms
            if min(parts[config]) > 0:
                assert predicted == pytest.approx(real.ms_per_cycle, rel=1e-6, abs=1e-9), (b, config)
            else:
                assert predicted >= real.ms_per_cycle * (1 - 1e-9), (b, config)
