"""The passes of a cycle on the reference runtime (:mod:`draftlab.models`), ready to profile.

Each pass runs after a KV cache of ``context_tokens`` and is undone after it (``keep`` of nothing),
so every timed call sees the same cache length:

- verify (and decode, at 1 token): ``TargetRunner.forward`` over ``tokens`` new tokens, causal;
- draft step: ``Eagle3Drafter.forward`` over ``rows`` frontier nodes that see only themselves
  (the tree mask of one draft step), with the drafter's own hidden states;
- draft-extend: ``Eagle3Drafter.forward`` over ``tokens`` accepted tokens with target features;
- with the target's own MTP head (:class:`~draftlab.models.mtp.MtpDrafter`): its draft step (``rows``
  frontier nodes with the head's own output as hidden state) and its extend (``tokens`` accepted tokens with
  the target's final hidden state), each one pass of the head (the projection, one decoder layer of the
  target's kind, the shared head) after ``context_tokens`` of its own cache, at every batch size through the
  head's batched computation (``forward_masked``, which its one-prompt ``forward`` runs too).

Batch size 1 times the passes ``generate`` runs one prompt at a time with (the runner's own cache,
static on CUDA); a larger batch B times the batched passes of
:class:`~draftlab.decode.batch_decoder.BatchSpeculativeDecoder` (:class:`~draftlab.models.target_batch.BatchTarget`,
:class:`~draftlab.models.drafter_batch.BatchDrafter`) over B rows of ``context_tokens`` each. A
timed pass leaves the caches as it found them (a batched pass writes its slots of preallocated
buffers and crops them away), so every call does the same work and none allocates a cache; the
in-place pack a real verify's ``keep`` does is then part of the decoder's measured overhead.

``cycles`` times the decoder's real cycles (plain, or a given config) over random prompts of
``context_tokens`` tokens, for :func:`draftlab.cost.overhead.fit_overhead`; ``mtp_cycles`` the same with the
MTP head drafting, on the runner that hands it the final hidden state (one prompt at a time, the only way
``generate`` decodes with the head), so the head is priced with its own decoder's per-cycle work.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from draftlab.cost.model import SpecConfig
from draftlab.cost.overhead import CycleSample
from draftlab.cost.profile import ModelInfo
from draftlab.cost.profiler import Workload
from draftlab.decode.batch_decoder import BatchSpeculativeDecoder
from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.models.devices import synchronize
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.drafter_batch import BatchDrafter
from draftlab.models.masks import attention_mask
from draftlab.models.mtp import MtpDrafter
from draftlab.models.target import TargetRunner
from draftlab.models.target_batch import BatchTarget

CYCLE_TOKENS = 49  # new tokens per prompt when timing real decoder cycles (the first comes from the prefill)
CYCLE_RUNS = 5  # timed runs of each length (prefill alone, and the full decode), medians taken


def runtime_workload(
    target: TargetRunner,
    drafter: Eagle3Drafter | None = None,
    *,
    context_tokens: int = 256,
    target_name: str | None = None,
    drafter_name: str | None = None,
    seed: int = 0,
    mtp: tuple[TargetRunner, MtpDrafter] | None = None,
) -> Workload:
    """Wrap a loaded target (and drafter) as a :class:`~draftlab.cost.profiler.Workload`; ``mtp``: the target's
    own MTP head and the runner handing it the final hidden state, whose passes are timed too."""
    cfg = target.config
    gen = torch.Generator().manual_seed(seed)
    device = target.device

    def ids(n: int) -> torch.Tensor:
        return torch.randint(0, cfg.vocab_size, (n,), generator=gen).to(device)

    context = ids(context_tokens)
    features = target.forward(context).aux  # [context, 3 x target hidden]
    target.reset()

    def verify(batch_size: int, tokens: int) -> Callable[[], object]:
        if batch_size > 1:
            return _batched_verify(target, batch_size, tokens, ids, context_tokens)
        target.reset()
        target.forward(context)
        new = ids(tokens)

        def run() -> None:
            target.forward(new)
            target.keep(new[:0])
        return run

    def drafter_pass(own_hidden: bool) -> Callable[[int, int], Callable[[], object]]:
        def factory(batch_size: int, tokens: int) -> Callable[[], object]:
            assert drafter is not None
            if batch_size > 1:
                return _batched_drafter_pass(drafter, batch_size, tokens, context, features, own_hidden, gen)
            drafter.reset()
            drafter.forward(context, features)
            new = ids(tokens)
            if own_hidden:  # frontier nodes: each sees the prefix and itself
                hidden = torch.randn(tokens, drafter.config.hidden_size, generator=gen)
                mask = torch.eye(tokens, dtype=torch.bool, device=device)
            else:  # accepted tokens with the target's features, causal
                hidden, mask = features[-tokens:], None
            hidden = hidden.to(device, features.dtype)

            def run() -> None:
                drafter.forward(new, hidden, tree_mask=mask)
                drafter.keep(new[:0])
            return run
        return factory

    def cycles(batch_size: int, config: SpecConfig | None) -> CycleSample:
        return _decoder_cycles(target, None if config is None else drafter, batch_size, config,
                               [ids(context_tokens).tolist() for _ in range(batch_size)])

    def mtp_cycles(batch_size: int, config: SpecConfig | None) -> CycleSample:
        assert mtp is not None and batch_size == 1
        runner, head = mtp
        return _decoder_cycles(runner, None if config is None else head, 1, config, [ids(context_tokens).tolist()])

    return Workload(
        model=ModelInfo(
            target=target_name, drafter=drafter_name, model_type=cfg.model_type,
            hidden_size=cfg.hidden_size, num_layers=cfg.num_layers, vocab_size=cfg.vocab_size,
            dtype=str(target.dtype).removeprefix("torch."),
        ),
        device=device,
        verify=verify,
        draft_step=None if drafter is None else drafter_pass(own_hidden=True),
        draft_extend=None if drafter is None else drafter_pass(own_hidden=False),
        mtp_draft_step=None if mtp is None else _mtp_pass(*mtp, context, gen, own_hidden=True),
        mtp_draft_extend=None if mtp is None else _mtp_pass(*mtp, context, gen, own_hidden=False),
        context_tokens=context_tokens,
        cycles=cycles,
        mtp_cycles=None if mtp is None else mtp_cycles,
    )


def _decoder_cycles(target: TargetRunner, drafter: Eagle3Drafter | MtpDrafter | None, batch_size: int,
                    config: SpecConfig | None, prompts: list[list[int]]) -> CycleSample:
    """Time ``generate``'s own decoder over ``CYCLE_TOKENS`` new tokens per prompt, less its prefill
    (timed alone), per verify cycle: medians of :data:`CYCLE_RUNS` interleaved runs after a warm-up."""
    flags = None if config is None else exact_spec_flags(config.steps, config.topk, config.num_draft_tokens)
    if batch_size == 1:
        single = SpeculativeDecoder(target, drafter, flags)

        def run(new: int) -> list[list[int]]:
            commits = list(single.stream(prompts[0], max_new_tokens=new, ignore_eos=True))
            return [[c.accept_length for c in commits if c.accept_length is not None]]
    else:
        batched = BatchSpeculativeDecoder(target, drafter, flags)

        def run(new: int) -> list[list[int]]:
            return [r.accept_lengths for r in batched.generate(prompts, max_new_tokens=new, ignore_eos=True)]

    def seconds(new: int) -> tuple[float, list[list[int]]]:
        synchronize(target.device)
        start = time.perf_counter()
        lengths = run(new)
        synchronize(target.device)
        return time.perf_counter() - start, lengths

    run(CYCLE_TOKENS)  # warm-up: graph capture, allocator
    prefills, fulls = [], []
    for _ in range(CYCLE_RUNS):  # interleaved, so a burst of load from elsewhere hits both kinds alike
        prefills.append(seconds(1)[0])
        fulls.append(seconds(CYCLE_TOKENS))
    lengths = fulls[0][1]
    cycles = max(len(row) for row in lengths)  # rows advance in lockstep: the batch's cycle count
    accepted = [n for row in lengths for n in row]
    ms = (statistics.median(t for t, _ in fulls) - statistics.median(prefills)) * 1000.0 / cycles
    return CycleSample(ms_per_cycle=ms, accept_length=sum(accepted) / len(accepted))


def _batched_verify(target: TargetRunner, batch_size: int, tokens: int, ids: Callable[[int], torch.Tensor],
                    context_tokens: int) -> Callable[[], object]:
    runner = BatchTarget(target, batch_size, context_tokens + tokens)
    context = torch.stack([ids(context_tokens) for _ in range(batch_size)])
    positions = torch.arange(context.shape[1], device=target.device).repeat(batch_size, 1)
    runner.forward(context, positions, last_only=True)
    new = torch.stack([ids(tokens) for _ in range(batch_size)])
    new_positions = context.shape[1] + torch.arange(tokens, device=target.device).repeat(batch_size, 1)
    drop = [[] for _ in range(batch_size)]

    def run() -> None:
        runner.forward(new, new_positions)
        runner.keep(drop)
    return run


def _batched_drafter_pass(drafter: Eagle3Drafter, batch_size: int, tokens: int, context: torch.Tensor,
                          features: torch.Tensor, own_hidden: bool, gen: torch.Generator) -> Callable[[], object]:
    device = context.device
    rows = context.repeat(batch_size, 1)
    runner = BatchDrafter(drafter, batch_size, rows.shape[1] + tokens)
    positions = torch.arange(rows.shape[1], device=device).repeat(batch_size, 1)
    runner.forward(rows, features.repeat(batch_size, 1, 1), positions)
    new = rows[:, -tokens:]
    new_positions = rows.shape[1] + torch.arange(tokens, device=device).repeat(batch_size, 1)
    if own_hidden:  # frontier nodes: each sees the prefix and itself
        hidden = torch.randn(batch_size, tokens, drafter.config.hidden_size, generator=gen).to(device, features.dtype)
        mask = torch.eye(tokens, dtype=torch.bool, device=device).repeat(batch_size, 1, 1)
    else:  # accepted tokens with the target's features, causal
        hidden, mask = features[-tokens:].repeat(batch_size, 1, 1), None
    drop = [[] for _ in range(batch_size)]

    def run() -> None:
        runner.forward(new, hidden, new_positions, tree_mask=mask)
        runner.keep(drop)
    return run


def _mtp_pass(runner: TargetRunner, head: MtpDrafter, context: torch.Tensor, gen: torch.Generator, *,
              own_hidden: bool) -> Callable[[int, int], Callable[[], object]]:
    """The MTP head's pass over ``tokens`` new entries per sequence of a batch, after the head's cache of the
    context (computed once per size): frontier nodes that see the prefix and themselves with the head's own
    output as hidden state (a draft step), or accepted tokens with the target's final hidden state, causal."""
    features = runner.forward(context).aux  # the final norm's output [context, hidden]
    runner.reset()
    device, n = context.device, context.numel()

    def factory(batch_size: int, tokens: int) -> Callable[[], object]:
        rows = context.repeat(batch_size, 1)
        positions = torch.arange(n, device=device).repeat(batch_size, 1)
        with torch.inference_mode():
            _, _, past = head.forward_masked(rows, features.repeat(batch_size, 1, 1), positions,
                                             attention_mask(0, None, n, device)[None])
        new = rows[:, -tokens:]
        new_positions = n + torch.arange(tokens, device=device).repeat(batch_size, 1)
        if own_hidden:
            hidden = torch.randn(batch_size, tokens, features.shape[-1], generator=gen).to(device, features.dtype)
            mask = attention_mask(n, torch.eye(tokens, dtype=torch.bool, device=device), tokens, device)[None]
        else:
            hidden, mask = features[-tokens:].repeat(batch_size, 1, 1), attention_mask(n, None, tokens, device)[None]

        def run() -> None:
            head.forward_masked(new, hidden, new_positions, mask, past)
        return run
    return factory
