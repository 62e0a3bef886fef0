"""The reference decoder behind a queue: one request decodes at a time, the rest wait their turn.

The decoder is batch 1, so concurrency is queueing: every HTTP handler thread submits a job and
reads that job's commits as the single worker thread produces them. The worker also keeps the
lifetime speculation counters the metrics endpoints expose (cycles, accepted drafts, per-position
acceptance), the way the engines count them: one verify cycle is one "draft", its accept length
counts the bonus token. Requests are counted by how they ended (``stop``, ``length``, ``abort`` when
the client left first), as vLLM's ``request_success`` does.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from draftlab.errors import DraftlabError


class CommitLike(Protocol):
    tokens: list[int]
    accept_length: int | None


class Decoder(Protocol):
    """``draftlab.decode.decoder.SpeculativeDecoder``'s streaming interface."""

    def stream(self, input_ids: list[int], *, max_new_tokens: int, temperature: float = 0.0,
               ignore_eos: bool = False, seed: int | None = None) -> Iterator[CommitLike]: ...


@dataclass(frozen=True)
class Job:
    """One generation request as the decoder sees it."""

    input_ids: list[int]
    max_new_tokens: int
    temperature: float
    ignore_eos: bool
    seed: int | None


@dataclass
class SpecCounters:
    """Lifetime totals since the server started (vLLM's counters; SGLang's cumulative average)."""

    num_drafts: int = 0  # verify cycles
    num_draft_tokens: int = 0  # draft tokens offered for verification
    num_accepted_tokens: int = 0  # accepted draft tokens (bonus excluded)
    accepted_per_pos: list[int] = field(default_factory=list)  # by depth along the accepted path
    generation_tokens: int = 0
    prompt_tokens: int = 0  # of every request the decoder prefilled
    requests: dict[str, int] = field(default_factory=dict)  # finished requests by finish reason

    def observe(self, accept_length: int, drafted: int) -> None:
        accepted = accept_length - 1
        self.num_drafts += 1
        self.num_draft_tokens += drafted
        self.num_accepted_tokens += accepted
        for pos in range(accepted):
            self.accepted_per_pos[pos] += 1

    @property
    def avg_accept_length(self) -> float | None:
        """SGLang's cumulative ``avg_spec_accept_length``: committed tokens per verify cycle."""
        return (self.num_accepted_tokens + self.num_drafts) / self.num_drafts if self.num_drafts else None


_END = object()


class JobStream:
    """The commits of one submitted job, in order; ``cancel`` stops it at the next commit."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self._items: queue.Queue[object] = queue.Queue()
        self.cancelled = threading.Event()

    def put(self, item: object) -> None:
        self._items.put(item)

    def cancel(self) -> None:
        self.cancelled.set()

    def __iter__(self) -> Iterator[CommitLike]:
        while True:
            item = self._items.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]


class ServeEngine:
    """Serialises jobs onto one decoder thread and counts speculation."""

    def __init__(self, decoder: Decoder, *, steps: int | None, num_draft_tokens: int | None) -> None:
        self.decoder = decoder
        self.speculative = steps is not None
        self.drafted_per_cycle = (num_draft_tokens or 1) - 1
        self.counters = SpecCounters(accepted_per_pos=[0] * (steps or 0))
        self.lock = threading.Lock()
        self._jobs: queue.Queue[JobStream | None] = queue.Queue()
        self._worker = threading.Thread(target=self._run, name="draftlab-decoder", daemon=True)
        self._worker.start()

    def submit(self, job: Job) -> JobStream:
        stream = JobStream(job)
        self._jobs.put(stream)
        return stream

    def close(self) -> None:
        self._jobs.put(None)
        self._worker.join(timeout=30)

    def finished(self, reason: str) -> None:
        """Count one request that ended: ``stop``, ``length`` or ``abort`` (the client left)."""
        with self.lock:
            self.counters.requests[reason] = self.counters.requests.get(reason, 0) + 1

    def snapshot(self) -> SpecCounters:
        with self.lock:
            c = self.counters
            return dataclasses.replace(c, accepted_per_pos=list(c.accepted_per_pos), requests=dict(c.requests))

    def _run(self) -> None:
        while True:
            stream = self._jobs.get()
            if stream is None:
                return
            if stream.cancelled.is_set():
                stream.put(_END)
                continue
            job = stream.job
            try:
                prefilled = False
                for commit in self.decoder.stream(job.input_ids, max_new_tokens=job.max_new_tokens,
                                                  temperature=job.temperature, ignore_eos=job.ignore_eos,
                                                  seed=job.seed):
                    with self.lock:
                        if not prefilled:
                            self.counters.prompt_tokens += len(job.input_ids)
                            prefilled = True
                        self.counters.generation_tokens += len(commit.tokens)
                        if self.speculative and commit.accept_length is not None:
                            self.counters.observe(commit.accept_length, self.drafted_per_cycle)
                    stream.put(commit)
                    if stream.cancelled.is_set():
                        break
            except DraftlabError as exc:
                stream.put(exc)
                continue
            except Exception as exc:  # a decoder bug must not kill the server; the client gets a 500
                stream.put(RuntimeError(f"decoder failed: {type(exc).__name__}: {exc}"))
                continue
            stream.put(_END)
