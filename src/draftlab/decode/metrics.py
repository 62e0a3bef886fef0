"""Accept-length accounting: the one place the convention is computed.

An accept length is the number of tokens one verify cycle commits, the bonus token included (as
SGLang, vLLM and the EAGLE papers count it): 1 to steps + 1 for a chain. The first token, from the
prefill, belongs to no cycle. The mean is the sum of accept lengths over the number of cycles.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class AcceptStats:
    num_cycles: int
    num_tokens: int  # sum of accept lengths (committed by cycles, before trimming)
    mean_accept_length: float  # num_tokens / num_cycles; 0.0 when there was no cycle
    histogram: dict[int, int]  # accept length -> cycles


def accept_stats(accept_lengths: Iterable[int]) -> AcceptStats:
    lengths = list(accept_lengths)
    total = sum(lengths)
    mean = total / len(lengths) if lengths else 0.0
    return AcceptStats(len(lengths), total, mean, dict(sorted(Counter(lengths).items())))
