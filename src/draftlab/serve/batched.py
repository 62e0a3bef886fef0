"""The reference server batching requests, with the draft length chosen per batch by a schedule.

:class:`BatchServeEngine` replaces :class:`~draftlab.serve.engine.ServeEngine`'s one-at-a-time
worker: it takes the waiting requests (up to ``max_batch``; after the first arrives it keeps
gathering while more arrive within ``gather_s`` of each other) and decodes them together, in
lockstep, with :class:`~draftlab.decode.batch_decoder.BatchSpeculativeDecoder` (static batching: the
batch runs until its last row is done; requests that arrive meanwhile wait for the next batch).
The batch's size picks the draft length K through ``draft_length`` (a schedule's engine reading,
:meth:`draftlab.engines.schedule.LoadedSchedule.draft_length`, or a constant): a chain of K drafts,
or plain decoding for K = 0. That is the batch the planner predicts (the profile's batched passes;
a batch of one runs the batch-1 :class:`~draftlab.decode.decoder.SpeculativeDecoder`, as the planner
profiles batch 1), so a sweep over concurrencies measures the plan's own claim.

Counting: a K = 0 step is a cycle that commits one token (it drafts nothing), so per-request and
server accept lengths stay tokens per decoder step; ``drafted_per_cycle`` (SGLang's proposed-draft
count in ``meta_info``) is the largest K. Requests batch together only with the same temperature,
seed and ``ignore_eos``; others wait for a later batch. At temperature 0 every row's tokens are the
batch-1 decoder's (barring float ties), whatever K its batches ran with.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from draftlab.decode.batch_decoder import BatchSpeculativeDecoder
from draftlab.decode.decoder import Commit, SpeculativeDecoder
from draftlab.engines.sglang_flags import SpecFlags
from draftlab.errors import DraftlabError
from draftlab.serve.engine import _END, JobStream, ServeEngine, SpecCounters

DEFAULT_GATHER_S = 0.02


class BatchServeEngine(ServeEngine):
    """Batches queued jobs and drafts ``draft_length(batch size)`` tokens per cycle for each batch."""

    def __init__(self, target: object, drafter: object | None, draft_length: Callable[[int], int], *,
                 max_draft_length: int, max_batch: int, gather_s: float = DEFAULT_GATHER_S) -> None:
        if max_batch < 1:
            raise DraftlabError(f"--max-batch must be at least 1 (got {max_batch})")
        if drafter is None and max_draft_length:
            raise DraftlabError("a draft length above 0 needs --drafter")
        self.target, self.drafter, self.draft_length = target, drafter, draft_length
        self.max_batch, self.gather_s = max_batch, gather_s
        self.speculative = drafter is not None
        self.drafted_per_cycle = max_draft_length
        self.counters = SpecCounters(accepted_per_pos=[0] * max_draft_length)
        self.batch_sizes: dict[int, int] = {}  # batch size -> batches run (what the schedule was asked)
        self._decoders: dict[int, BatchSpeculativeDecoder] = {}
        self._single: dict[int, SpeculativeDecoder] = {}
        self.lock = threading.Lock()
        self._jobs: queue.Queue[JobStream | None] = queue.Queue()
        self._waiting: list[JobStream] = []
        self._worker = threading.Thread(target=self._run, name="draftlab-batcher", daemon=True)
        self._worker.start()

    def decoder(self, k: int) -> BatchSpeculativeDecoder:
        """The batched decoder for chains of ``k`` (0: plain decoding), made once."""
        if k not in self._decoders:
            flags = SpecFlags(k, 1, k + 1, "schedule") if k else None
            self._decoders[k] = BatchSpeculativeDecoder(self.target, self.drafter if k else None, flags)
        return self._decoders[k]

    def single(self, k: int) -> SpeculativeDecoder:
        """The batch-1 decoder for chains of ``k``: a batch of one runs the path the plan profiles at batch 1."""
        if k not in self._single:
            flags = SpecFlags(k, 1, k + 1, "schedule") if k else None
            self._single[k] = SpeculativeDecoder(self.target, self.drafter if k else None, flags)
        return self._single[k]

    def _run(self) -> None:
        closing = False
        while not closing or self._waiting:
            batch, closing = self._gather(closing)
            if batch:
                self._decode(batch)

    def _gather(self, closing: bool) -> tuple[list[JobStream], bool]:
        """The next batch: waiting jobs first, then new arrivals while they keep coming (same settings only)."""
        pending, self._waiting = self._waiting, []
        if not pending and not closing:
            first = self._jobs.get()
            if first is None:
                return [], True
            pending.append(first)
        while not closing and len(pending) < self.max_batch:
            try:
                job = self._jobs.get(timeout=self.gather_s)
            except queue.Empty:
                break
            if job is None:
                closing = True
            else:
                pending.append(job)
        for stream in [s for s in pending if s.cancelled.is_set()]:  # the client left while it waited
            stream.put(_END)
            pending.remove(stream)
        if not pending:
            return [], closing
        key = _settings(pending[0])
        batch = [s for s in pending if _settings(s) == key][: self.max_batch]
        self._waiting = [s for s in pending if s not in batch]
        return batch, closing

    def _decode(self, batch: list[JobStream]) -> None:
        k = self.draft_length(len(batch))
        jobs = [s.job for s in batch]
        produced = [0] * len(batch)
        done = [False] * len(batch)
        eos = set(self.target.eos_token_ids)

        def on_commit(row: int, tokens: list[int], accept_length: int | None) -> None:
            if done[row]:
                return
            job, stream = jobs[row], batch[row]
            tokens = tokens[: job.max_new_tokens - produced[row]]
            produced[row] += len(tokens)
            with self.lock:
                if accept_length is None:
                    self.counters.prompt_tokens += len(job.input_ids)
                self.counters.generation_tokens += len(tokens)
                if self.speculative and accept_length is not None:
                    self.counters.observe(accept_length, k)
            stream.put(Commit(tokens, accept_length))
            stopped = bool(tokens) and not job.ignore_eos and tokens[-1] in eos
            if stopped or produced[row] >= job.max_new_tokens or stream.cancelled.is_set():
                done[row] = True
                stream.put(_END)

        with self.lock:
            self.batch_sizes[len(batch)] = self.batch_sizes.get(len(batch), 0) + 1
        try:
            if len(jobs) == 1:
                job = jobs[0]
                for commit in self.single(k).stream(job.input_ids, max_new_tokens=job.max_new_tokens,
                                                    temperature=job.temperature, ignore_eos=job.ignore_eos,
                                                    seed=job.seed):
                    on_commit(0, commit.tokens, commit.accept_length)
                    if done[0]:
                        break
            else:
                self.decoder(k).generate([j.input_ids for j in jobs],
                                         max_new_tokens=max(j.max_new_tokens for j in jobs),
                                         temperature=jobs[0].temperature, ignore_eos=jobs[0].ignore_eos,
                                         seed=jobs[0].seed, on_commit=on_commit)
        except DraftlabError as exc:
            failure: BaseException = exc
        except Exception as exc:  # a decoder bug must not kill the server; the clients get a 500
            failure = RuntimeError(f"decoder failed: {type(exc).__name__}: {exc}")
        else:
            failure = None
        for row, stream in enumerate(batch):
            if not done[row]:
                stream.put(failure if failure is not None else _END)


def _settings(stream: JobStream) -> tuple[float, bool, int | None]:
    job = stream.job
    return job.temperature, job.ignore_eos, job.seed

