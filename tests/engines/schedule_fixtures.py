"""Plans built by hand: predicted tok/s per (chain length, batch size), so the best K is known."""

from __future__ import annotations

from draftlab.cost.plan import ConfigPlan, Plan


def row(steps: int, batch: int, tps: float, *, topk: int = 1, ndt: int | None = None) -> ConfigPlan:
    base = 100.0 * batch
    return ConfigPlan(steps=steps, topk=topk, num_draft_tokens=ndt or steps + 1, batch_size=batch,
                      accept_length=1 + 0.6 * steps, accept_length_source="test", cycle_ms=10.0,
                      tokens_per_second=tps, speedup=tps / base, break_even_accept_length=1.5,
                      draft_extend_ms=1.0, draft_steps_ms=1.0, verify_ms=7.0, allreduce_ms=0.0, overhead_ms=1.0)


def plan_of(table: dict[int, dict[int, float]], trees: dict[int, float] | None = None) -> Plan:
    """``table[batch][K]`` = predicted tok/s of the chain of K; the baseline is 100 x batch tok/s.
    ``trees[batch]``: a 3/4/8 tree's tok/s there (the schedule must ignore it)."""
    rows = [row(k, b, tps) for b, ks in table.items() for k, tps in ks.items()]
    rows += [row(3, b, tps, topk=4, ndt=8) for b, tps in (trees or {}).items()]
    best = {b: max((r for r in rows if r.batch_size == b), key=lambda r: r.tokens_per_second) for b in table}
    return Plan(baseline_tokens_per_second={b: 100.0 * b for b in table}, decode_ms={b: 10.0 for b in table},
                configs=rows, best=best, verdict="")


# K 4 wins at batch 1, K 2 at 4, K 1 at 16, nothing beats plain decoding at 64 (K 1 is 1% slower),
# and a tree that would win at batch 1 if trees counted.
FALLING = plan_of(
    {1: {1: 150.0, 2: 180.0, 3: 195.0, 4: 199.0},
     4: {1: 520.0, 2: 560.0, 3: 540.0, 4: 500.0},
     16: {1: 1700.0, 2: 1650.0, 3: 1500.0, 4: 1300.0},
     64: {1: 6336.0, 2: 6000.0, 3: 5500.0, 4: 5000.0}},
    trees={1: 250.0},
)
# K 2 at batch 1 but K 4 at batch 8 (a plan can say this): TensorRT-LLM must cap it.
RISING = plan_of({1: {2: 180.0, 4: 170.0}, 8: {2: 900.0, 3: 950.0, 4: 990.0}})
