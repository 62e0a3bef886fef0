"""The speculation cost model: what one speculative cycle costs and what it buys.

One EAGLE-3 cycle at batch size B for a config (steps S, topk K, num_draft_tokens N) is, as SGLang
runs it:

- a draft-extend: the drafter re-run over the tokens the last verify accepted (accept length tokens
  per sequence, with the target's features); its last position gives the step-0 top-K tokens;
- S - 1 further draft passes, each over B x K rows (the K frontier nodes of every sequence);
- one target verify over B x N tokens (the root plus the N - 1 selected draft tokens);
- a fixed per-cycle overhead (tree building, sampling, bookkeeping).

A cycle commits ``accept_length`` tokens per sequence, so speculative throughput is
``B x accept_length / cycle``, the plain-decoding baseline is ``B / decode_step``, and speculation
pays off exactly when the accept length exceeds ``cycle / decode_step`` (the break-even accept
length). These formulas live here and nowhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.errors import DraftlabError


@dataclass(frozen=True, order=True)
class SpecConfig:
    """The three speculation flags with SGLang semantics (``--speculative-num-steps`` etc.)."""

    steps: int
    topk: int
    num_draft_tokens: int

    def __post_init__(self) -> None:
        """Refuse what SGLang would reject or silently rewrite (its rules live in engines/)."""
        exact_spec_flags(self.steps, self.topk, self.num_draft_tokens)

    @property
    def label(self) -> str:
        """``steps/topk/num_draft_tokens``, the form the CLI reads and prints."""
        return f"{self.steps}/{self.topk}/{self.num_draft_tokens}"

    @property
    def draft_passes(self) -> int:
        """Drafter passes after the draft-extend (which already yields the step-0 tokens)."""
        return self.steps - 1

    @classmethod
    def parse(cls, text: str) -> SpecConfig:
        """Read ``"3/1/4"`` (steps/topk/num_draft_tokens)."""
        match = re.fullmatch(r"\s*(\d+)/(\d+)/(\d+)\s*", text)
        if match is None:
            raise DraftlabError(
                f"speculation config {text!r}: expected steps/topk/num_draft_tokens, e.g. 3/1/4"
            )
        return cls(*(int(g) for g in match.groups()))


@dataclass(frozen=True)
class CycleBreakdown:
    """Where one cycle's time goes, in milliseconds. ``allreduce_ms`` is the tensor-parallel
    communication of the verify (zero when not measured); it adds to the other parts."""

    draft_extend_ms: float
    draft_steps_ms: float
    verify_ms: float
    allreduce_ms: float
    overhead_ms: float

    @property
    def total_ms(self) -> float:
        return (
            self.draft_extend_ms + self.draft_steps_ms + self.verify_ms + self.allreduce_ms
            + self.overhead_ms
        )


def cycle_breakdown(
    *,
    config: SpecConfig,
    draft_extend_ms: float,
    draft_step_ms: float,
    verify_ms: float,
    allreduce_ms: float = 0.0,
    overhead_ms: float = 0.0,
) -> CycleBreakdown:
    """Assemble a cycle from per-pass costs (``draft_step_ms`` is one pass over B x K rows)."""
    return CycleBreakdown(
        draft_extend_ms=draft_extend_ms,
        draft_steps_ms=config.draft_passes * draft_step_ms,
        verify_ms=verify_ms,
        allreduce_ms=allreduce_ms,
        overhead_ms=overhead_ms,
    )


def tokens_per_second(batch_size: int, accept_length: float, cycle_ms: float) -> float:
    """Speculative throughput: every cycle commits ``accept_length`` tokens per sequence."""
    return _per_second(batch_size * accept_length, cycle_ms, "cycle_ms")


def baseline_tokens_per_second(batch_size: int, decode_ms: float) -> float:
    """Plain decoding: one token per sequence per decode step."""
    return _per_second(batch_size, decode_ms, "decode_ms")


def break_even_accept_length(cycle_ms: float, decode_ms: float) -> float:
    """The accept length at which a cycle commits tokens exactly as fast as plain decoding."""
    _positive("decode_ms", decode_ms)
    return cycle_ms / decode_ms


def cycle_ms_from_throughput(batch_size: int, accept_length: float, tps: float) -> float:
    """Invert :func:`tokens_per_second`: the cycle time a measured speculative run implies."""
    return _per_second(batch_size * accept_length, tps, "tokens per second")


def decode_ms_from_throughput(batch_size: int, tps: float) -> float:
    """Invert :func:`baseline_tokens_per_second`: the decode step a measured baseline implies."""
    return _per_second(batch_size, tps, "baseline tokens per second")


def _per_second(tokens: float, divisor: float, name: str) -> float:
    """``tokens * 1000 / divisor``: tokens per second from ms per cycle, and (the same arithmetic, its own
    inverse) ms per cycle from tokens per second. ``name`` is the divisor's, for the error when it is not
    positive."""
    _positive(name, divisor)
    return tokens * 1000.0 / divisor


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise DraftlabError(f"{name} must be positive, got {value}")
