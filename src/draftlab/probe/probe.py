"""``probe``: the exact greedy accept lengths of a drafter on a target and data, from one target pass.

    continuations (target greedy, or given) -> one batched target pass over prompt + continuation
    (aux features, target argmax) -> the drafter for every cycle start at once (:mod:`.drafts`)
    -> the decoder's walk over the continuation (:mod:`.walk`)

At temperature 0, with the target's own greedy continuation, the per-prompt accept lengths are the
ones ``draftlab generate`` reports. With given continuations that the target would not have
produced, the share of positions where the target disagrees is reported: the figures then describe
that text, not what the target would generate.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import Progress

from draftlab.checkpoint import DrafterConfig, TargetConfig, open_checkpoint
from draftlab.engines import ENGINES, aux_layers
from draftlab.engines.sglang_flags import SpecFlags, resolve_spec_flags
from draftlab.errors import DraftlabError
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner
from draftlab.probe.continuations import greedy_continuations, read_responses
from draftlab.probe.drafts import accepted_drafts
from draftlab.probe.walk import acceptance_by_step, decoder_walk, histogram_list, per_position_lengths
from draftlab.spec.metrics import accept_stats
from draftlab.spec.prompts import read_prompts

RESPONSES = ("generate", "given")


@dataclass
class ProbePromptResult:
    prompt_index: int  # 0-based, in file order
    accept_lengths: list[int]  # one per verify cycle, bonus included, as generate reports them
    num_cycles: int
    continuation_tokens: int  # tokens the walk covered (max_new_tokens, or the given response)
    target_disagreement: float | None  # share of those tokens that are not the target's argmax


@dataclass
class ProbeResult:
    config: dict[str, Any]
    mean_accept_length: float  # over all cycles of all prompts
    acceptance_by_step: list[float | None]  # P(draft j accepted | drafts < j accepted), j = 1..steps
    accept_length_histogram: list[int]  # index = accept length
    per_position_accept_length: float  # a cycle rooted at every continuation token (teacher-forced)
    vocab_bound: float  # share of drafted-for continuation tokens inside the draft vocabulary
    target_disagreement: float | None  # over all continuation tokens; 0 for target greedy continuations
    skipped_prompts: int  # prompts with no room left in the target's context
    results: list[ProbePromptResult]


@dataclass
class _Sample:
    index: int
    tokens: list[int]  # prompt + continuation (+ look-ahead)
    prompt_len: int
    max_new_tokens: int  # tokens the walk must produce


def probe(target: str | Path, drafter: str | Path, prompts: str | Path, *, steps: int | None = None,
          topk: int | None = None, num_draft_tokens: int | None = None, max_new_tokens: int = 128,
          responses: str = "generate", batch_size: int = 4, dtype: str = "float32", device: str = "cpu",
          engine: str = "sglang", progress: bool = False) -> ProbeResult:
    """Exact greedy accept lengths of ``drafter`` on ``target`` over the prompts of ``prompts``."""
    if engine not in ENGINES:
        raise DraftlabError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if responses not in RESPONSES:
        raise DraftlabError(f"--responses must be one of {', '.join(RESPONSES)}, got {responses!r}")
    if max_new_tokens < 2:
        raise DraftlabError(f"--max-new-tokens must be >= 2 (the first token belongs to no cycle), got {max_new_tokens}")
    if batch_size < 1:
        raise DraftlabError(f"--batch-size must be >= 1, got {batch_size}")
    target_cfg = TargetConfig.from_dict(open_checkpoint(target).config)
    flags = probe_flags(steps, topk, num_draft_tokens, target_cfg.architecture)
    rows = read_prompts(prompts, tokenizer_dir=target, vocab_size=target_cfg.vocab_size)
    given = read_responses(prompts, len(rows), target_cfg.vocab_size) if responses == "given" else None

    drafter_cfg = DrafterConfig.from_dict(open_checkpoint(drafter).config)
    layers = aux_layers(engine, drafter_cfg, target_cfg.num_layers).layers
    runner = TargetRunner.load(target, aux_layers=layers, dtype=dtype, device=device)
    draft_model = Eagle3Drafter.load(drafter, target=runner, dtype=dtype, device=device)
    context = target_cfg.max_position_embeddings

    kept = [(i, row.input_ids) for i, row in enumerate(rows) if context is None or len(row.input_ids) < context]
    with Progress(console=Console(stderr=True), transient=True, disable=not progress) as bar:
        if given is None:
            task = bar.add_task("target greedy continuations", total=len(kept))
            room = [max_new_tokens + flags.steps if context is None else
                    min(max_new_tokens + flags.steps, context - len(p)) for _, p in kept]
            conts = greedy_continuations(runner, [p for _, p in kept], max(room, default=0),
                                         batch_size=batch_size, advance=lambda n: bar.advance(task, n))
            samples = [_Sample(i, p + c[:r], len(p), min(max_new_tokens, r)) for (i, p), c, r in zip(kept, conts, room)]
        else:
            samples = []
            for i, p in kept:
                response = given[i][:max(0, context - len(p))] if context is not None else given[i]
                samples.append(_Sample(i, p + response, len(p), min(max_new_tokens, len(response))))
        task = bar.add_task("probing", total=len(samples))
        per_prompt, per_position, in_vocab, drafted = [], [], 0, 0
        draft_ids = set(draft_model.to_target_ids(torch.arange(draft_model.d2t.numel())).tolist())
        for batch, accepted, argmax in _probe_batches(runner, draft_model, samples, flags, batch_size):
            for sample, acc, top in zip(batch, accepted, argmax):
                lengths = decoder_walk(acc, sample.tokens, sample.prompt_len, sample.max_new_tokens,
                                       steps=flags.steps, eos=runner.eos_token_ids, context=context)
                per_position += per_position_lengths(acc, sample.prompt_len, sample.max_new_tokens)
                span = range(sample.prompt_len, sample.prompt_len + sample.max_new_tokens)
                disagree = sum(int(top[i - 1]) != sample.tokens[i] for i in span) / len(span)
                in_vocab += sum(sample.tokens[i] in draft_ids for i in span[1:])
                drafted += len(span) - 1
                per_prompt.append(ProbePromptResult(sample.index, lengths, len(lengths), len(span), disagree))
            bar.advance(task, len(batch))

    all_lengths = [n for r in per_prompt for n in r.accept_lengths]
    covered = sum(r.continuation_tokens for r in per_prompt)
    config = {
        "target": str(target), "drafter": str(drafter), "engine": engine, "steps": flags.steps, "topk": flags.topk,
        "num_draft_tokens": flags.num_draft_tokens, "flags_source": flags.source, "aux_layers": layers,
        "max_new_tokens": max_new_tokens, "temperature": 0.0, "responses": responses, "batch_size": batch_size,
        "dtype": dtype, "device": device, "num_prompts": len(rows),
    }
    return ProbeResult(
        config=config,
        mean_accept_length=accept_stats(all_lengths).mean_accept_length,
        acceptance_by_step=acceptance_by_step(all_lengths, flags.steps),
        accept_length_histogram=histogram_list(all_lengths, flags.steps),
        per_position_accept_length=accept_stats(per_position).mean_accept_length,
        vocab_bound=in_vocab / drafted if drafted else 0.0,
        target_disagreement=(sum(r.target_disagreement * r.continuation_tokens for r in per_prompt) / covered
                             if covered else None),
        skipped_prompts=len(rows) - len(kept),
        results=per_prompt,
    )


def probe_flags(steps: int | None, topk: int | None, num_draft_tokens: int | None, architecture: str) -> SpecFlags:
    """SGLang's flags; refuse what SGLang would silently rewrite (as ``generate`` does)."""
    flags = resolve_spec_flags(steps, topk, num_draft_tokens, architecture=architecture)
    if flags.rewrites:
        raise DraftlabError(
            f"{flags.rewrites[0]}; pass --num-draft-tokens {flags.num_draft_tokens} to probe what SGLang runs")
    return flags


def _probe_batches(runner: TargetRunner, drafter: Eagle3Drafter, samples: list[_Sample], flags: SpecFlags,
                   batch_size: int) -> Iterator[tuple[list[_Sample], list[list[int]], list[list[int]]]]:
    """Per batch: the drafts each cycle start accepts, and the target's argmax at every position."""
    for start in range(0, len(samples), batch_size):
        batch = samples[start:start + batch_size]
        width = max(len(s.tokens) for s in batch)
        tokens = torch.zeros(len(batch), width, dtype=torch.long)
        for row, s in enumerate(batch):
            tokens[row, :len(s.tokens)] = torch.tensor(s.tokens)
        step = runner.forward_batch(tokens)
        argmax = _argmax(runner, step.hidden)
        truth = torch.full((len(batch), width + flags.steps + 1), -1, dtype=torch.long)
        for row, s in enumerate(batch):  # the known text, then the target's next token after its end
            truth[row, :len(s.tokens)] = tokens[row, :len(s.tokens)]
            truth[row, len(s.tokens)] = argmax[row, len(s.tokens) - 1]
        accepted = accepted_drafts(drafter, tokens, step.aux, truth, flags)
        yield batch, accepted.tolist(), argmax.tolist()


def _argmax(runner: TargetRunner, hidden: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """The target's greedy token at every position, [B, L] on the CPU, computed in chunks of positions."""
    parts = [runner.lm_head(hidden[:, i:i + chunk]).argmax(-1).cpu() for i in range(0, hidden.shape[1], chunk)]
    return torch.cat(parts, dim=1)
