"""What the reference server adds to the decoder, and its predicted throughput: ``plan --served``.

``draftlab serve`` with batching (:mod:`draftlab.serve.batched`) does more than decode. Per batch it
gathers the requests in flight (waiting ``gather_s`` after the last arrival), prefills them, opens
and ends each stream; per cycle, for every row, its HTTP threads detokenize the commit and write an
SSE chunk under the same interpreter lock as the decoder thread, and the bench client parses each
chunk on the same machine. None of it is in the timed passes, and on a small CPU model it is a large
share of the time. So it is measured through the server itself: plain decoding (no drafter) served
by a real ``draftlab serve --max-batch`` and benched by the real client (:func:`draftlab.bench.run.run_bench`)
at each batch size b (concurrency b: static batches of b), for a short and a long request, which
fits, per batch,

    batch time T(N) = batch_ms + (N - 1) x step_ms

``step_ms`` is the served plain step (the decoder's step with the host work of b streams beside it),
``batch_ms`` the per-batch cost. A speculative cycle served is the decoder's cycle (from the profile)
stretched by the factor the server stretches a plain step, ``cycle x step_ms / decode_ms``: the host
work is not a fixed cost beside the decoder but contention for the interpreter lock and the cores,
which slows every part of the decoder's (Python-heavy) work alike. Measured: against two 8-concurrency
sweeps of the toy pair, this put 25 of 32 and 20 of 32 speculative arms within 15% of the measured
speculative / plain ratio, where adding the plain step's host work once per cycle put 8 and 14
(benchmarks/RESULTS.md, "Schedule under load"). For requests of N new tokens (the calibration's long
request) at accept length AL, served tok/s is ``b x N / (batch_ms + (N - 1) / AL x served cycle)``:
the bench's own measure, every request of a static batch ending together.
"""

from __future__ import annotations

import socket
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from draftlab.cost.outliers import out_of_line
from draftlab.errors import DraftlabError

SHORT_TOKENS = 8  # the short request of the calibration (new tokens)
BATCHES_PER_RUN = 3  # static batches timed per run (after one batch of warm-up)


@dataclass(frozen=True)
class ServedCost:
    """The reference server's plain decoding at one batch size, measured through it (ms)."""

    batch_size: int
    step_ms: float  # per served plain step (decoder + host work of the batch's streams)
    batch_ms: float  # per static batch: gathering, prefill, stream setup and end, the client's turnaround
    request_tokens: int  # new tokens per request the prediction is for (the long calibration request)

    def cycle_ms(self, cycle_ms: float, decode_ms: float) -> float:
        """A served speculative cycle: the decoder's cycle, slowed as the server slows its plain step."""
        return cycle_ms * self.step_ms / decode_ms

    def tokens_per_second(self, accept_length: float, served_cycle_ms: float) -> float:
        """Output tok/s of static batches of requests of ``request_tokens`` new tokens."""
        n = self.request_tokens
        batch = self.batch_ms + (n - 1) / accept_length * served_cycle_ms
        if not batch > 0:
            raise DraftlabError(f"served batch time must be positive, got {batch} ms")
        return self.batch_size * n * 1000.0 / batch


def fit_served(batch_size: int, short: tuple[int, float], long: tuple[int, float]) -> ServedCost:
    """The line through (new tokens, ms per batch) of the short and the long request."""
    (n0, t0), (n1, t1) = short, long
    if not n1 > n0 >= 1:
        raise DraftlabError(f"served calibration needs 1 <= short < long request tokens, got {n0} and {n1}")
    step = (t1 - t0) / (n1 - n0)
    return ServedCost(batch_size, step_ms=step, batch_ms=t0 - (n0 - 1) * step, request_tokens=n1)


BatchTimer = Callable[[int, int], float]  # (batch size, new tokens) -> ms per static batch, one run


def calibrate(batch_sizes: Sequence[int], request_tokens: int, time_batch: BatchTimer, *,
              rounds: int = 3) -> list[ServedCost]:
    """Time every (batch size, request length) with ``time_batch`` in ``rounds`` interleaved passes
    (every other pass backwards), fit each batch size on the medians. A batch size out of line with
    its neighbours (:func:`draftlab.cost.outliers.out_of_line`) is timed again, and the calmer of its two
    measurements (lower long-request median: load only adds time) kept."""
    if request_tokens <= SHORT_TOKENS:
        raise DraftlabError(f"--served needs requests longer than {SHORT_TOKENS} new tokens (--max-new-tokens), "
                            f"got {request_tokens}")
    lengths = (SHORT_TOKENS, request_tokens)
    med = _medians([(b, n) for b in batch_sizes for n in lengths], time_batch, rounds)
    odd = sorted({b for _, b in out_of_line({n: {b: med[b, n] for b in batch_sizes} for n in lengths})})
    if odd:
        again = _medians([(b, n) for b in odd for n in lengths], time_batch, rounds)
        for b in odd:
            if again[b, request_tokens] < med[b, request_tokens]:
                med.update({(b, n): again[b, n] for n in lengths})
    return [fit_served(b, (SHORT_TOKENS, med[b, SHORT_TOKENS]), (request_tokens, med[b, request_tokens]))
            for b in batch_sizes]


def _medians(points: list[tuple[int, int]], time_batch: BatchTimer, rounds: int) -> dict[tuple[int, int], float]:
    samples: dict[tuple[int, int], list[float]] = {p: [] for p in points}
    for r in range(rounds):
        for p in points if r % 2 == 0 else reversed(points):
            samples[p].append(time_batch(*p))
    return {p: statistics.median(s) for p, s in samples.items()}


def measure_served(target: str | Path, prompts: str | Path, batch_sizes: Sequence[int], request_tokens: int, *,
                   device: str, dtype: str, threads: int, log: Path, rounds: int = 3,
                   health_timeout_s: float = 600.0) -> list[ServedCost]:
    """Launch ``draftlab serve --target T --max-batch N`` (plain decoding; N as ``draftlab sweep`` sets it) on a
    free port and calibrate it with the bench client on ``prompts``; the server's output goes to ``log``."""
    from draftlab.bench.client import BenchConfig
    from draftlab.bench.run import run_bench
    from draftlab.bench.workload import load_prompts
    from draftlab.engines.launch import (
        REFERENCE,
        SPEC_MAX_RUNNING_REQUESTS,
        EngineProcess,
        LaunchRequest,
        engine_command,
    )

    loaded = load_prompts(prompts)
    cap = max(SPEC_MAX_RUNNING_REQUESTS, *batch_sizes)  # the cap sweep gives every entry: the same gathering
    command = engine_command(LaunchRequest(
        engine=REFERENCE, target=str(target), port=_free_port(), max_running_requests=cap,
        extra_args=("--max-batch", str(cap), "--device", device, "--dtype", dtype, "--threads", str(threads))))

    def time_batch(b: int, n: int) -> float:
        config = BenchConfig(base_url=command.base_url, api="sglang", num_prompts=BATCHES_PER_RUN * b,
                             concurrency=b, max_tokens=n, ignore_eos=True, warmup=b)
        result = run_bench(config, loaded)
        if result.completed != BATCHES_PER_RUN * b:
            why = result.errors[0]["example"] if result.errors else "requests did not complete"
            raise DraftlabError(f"served calibration at batch {b}: {why} (server log: {log})")
        return result.duration_s * 1000.0 / BATCHES_PER_RUN

    with EngineProcess(command, log) as server:
        server.start()
        server.wait_healthy(health_timeout_s)
        return calibrate(batch_sizes, request_tokens, time_batch, rounds=rounds)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

