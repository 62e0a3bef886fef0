"""The decoder's own work per cycle, measured: what the timed passes leave out.

A real cycle is more than its passes: tree building, the walk, cache bookkeeping and the host-side
work that launches each pass. :func:`fit_overhead` measures it the only honest way, by timing the
reference decoder's real cycles and subtracting the passes' measured costs:

- plain decoding gives ``decode_ms``, the overhead of one plain decode step;
- chain ``1/1/2`` (no draft step after the draft-extend) gives ``cycle_ms``, a cycle's fixed part;
- chain ``4/1/5`` (three more draft steps) gives ``draft_step_ms``, the extra work per draft step;
- tree ``4/4/8`` (the same steps, top-4 at each) gives ``tree_ms``, what a tree adds to a chain's cycle
  (ranking more candidates, a larger tree to build and walk), a constant per cycle of any topk > 1.

Every other config is then predicted, not measured. Negative differences (timing noise on a machine
where the work is negligible) count as zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from draftlab.cost.model import SpecConfig

SHORT = SpecConfig(1, 1, 2)
LONG = SpecConfig(4, 1, 5)
TREE = SpecConfig(4, 4, 8)
CALIBRATION = (SHORT, LONG, TREE)


@dataclass(frozen=True)
class CycleSample:
    """Real decoder cycles at one batch size: milliseconds per cycle and the mean accept length."""

    ms_per_cycle: float
    accept_length: float


@dataclass(frozen=True)
class Overhead:
    """Per-cycle work of the reference decoder beyond its passes, at one batch size (ms)."""

    batch_size: int
    decode_ms: float  # per plain decode step
    cycle_ms: float  # per speculative cycle
    draft_step_ms: float  # per draft step after the first
    tree_ms: float = 0.0  # per cycle of a tree (topk > 1), beyond a chain's; 0 in profiles that predate it

    def of(self, config: SpecConfig) -> float:
        """The overhead of one cycle of ``config``."""
        tree = self.tree_ms if config.topk > 1 else 0.0
        return self.cycle_ms + config.draft_passes * self.draft_step_ms + tree


CycleRunner = Callable[[int, SpecConfig | None], CycleSample]
Passes = Callable[[int, SpecConfig, float], float]


def fit_overhead(batch_size: int, run_cycles: CycleRunner, passes_ms: Passes, decode_pass_ms: float, *,
                 trees: bool = True) -> Overhead:
    """Time plain decoding and the calibration configs with ``run_cycles`` and subtract
    ``passes_ms(batch, config, accept_length)`` (or ``decode_pass_ms``) from each; without ``trees`` (a
    drafter served as a chain only) the tree is not run and adds nothing."""
    plain = run_cycles(batch_size, None).ms_per_cycle - decode_pass_ms
    short, long = (run_cycles(batch_size, c) for c in (SHORT, LONG))
    fixed = short.ms_per_cycle - passes_ms(batch_size, SHORT, short.accept_length)
    step = (long.ms_per_cycle - passes_ms(batch_size, LONG, long.accept_length) - fixed) \
        / (LONG.draft_passes - SHORT.draft_passes)
    chain = Overhead(batch_size, decode_ms=max(0.0, plain), cycle_ms=max(0.0, fixed), draft_step_ms=max(0.0, step))
    if not trees:
        return chain
    tree = run_cycles(batch_size, TREE)
    extra = tree.ms_per_cycle - passes_ms(batch_size, TREE, tree.accept_length) - chain.of(TREE)
    return replace(chain, tree_ms=max(0.0, extra))
