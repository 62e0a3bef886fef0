"""The texts a probe walks: each prompt with its continuation (the target's, the file's, or a run of
target-produced tokens in a captured features file), cut to the target's context."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from rich.progress import Progress

from draftlab.decode.prompts import read_prompts
from draftlab.distributed import gather
from draftlab.errors import DraftlabError
from draftlab.probe.batching import CPU_BATCH, auto_batch_size
from draftlab.probe.continuations import read_responses, target_continuations
from draftlab.probe.features import feature_files, read_sample, response_spans
from draftlab.probe.options import ProbeModels, ProbeOptions


@dataclass
class Sample:
    index: int
    tokens: list[int]  # prompt + continuation (+ look-ahead)
    prompt_len: int
    max_new_tokens: int  # tokens the walk must produce
    aux: torch.Tensor | None = None  # captured features (--features), else computed by the live target
    final_hidden: torch.Tensor | None = None


@dataclass
class Decoded:
    """Prompts with the continuations the probe walks (the target's greedy ones, or the file's)."""

    samples: list[Sample]
    num_inputs: int  # prompts in the file, kept or not
    batch_size: int

    @property
    def indices(self) -> list[int]:
        """Each kept prompt's 0-based line in the file."""
        return [s.index for s in self.samples]

    @property
    def prompts(self) -> list[list[int]]:
        return [s.tokens[:s.prompt_len] for s in self.samples]

    @property
    def continuations(self) -> list[list[int]]:
        """Each continuation with its look-ahead (what a last cycle's drafts are checked against)."""
        return [s.tokens[s.prompt_len:] for s in self.samples]

    @property
    def max_new_tokens(self) -> list[int]:
        """Tokens each walk must produce."""
        return [s.max_new_tokens for s in self.samples]


def live_samples(models: ProbeModels, options: ProbeOptions, target_dir: str | Path, prompts: str | Path,
                 bar: Progress) -> Decoded:
    """Prompts and their continuations (the target's, or the file's with ``responses="given"``), cut to
    the context; the batch size is ``options.batch_size``, or chosen from free memory when None."""
    config = models.target_config
    rows = read_prompts(prompts, tokenizer_dir=target_dir, vocab_size=config.vocab_size)
    context = config.max_position_embeddings
    kept = [(i, row.input_ids) for i, row in enumerate(rows) if context is None or len(row.input_ids) < context]
    if rows and not kept:
        raise no_room(prompts, len(rows), context)
    if options.responses == "given":
        given = read_responses(prompts, len(rows), config.vocab_size)
        samples = []
        for i, p in kept:
            response = given[i][:context - len(p)] if context is not None else given[i]
            samples.append(Sample(i, p + response, len(p), min(options.max_new_tokens, len(response))))
        longest = max((len(s.tokens) for s in samples), default=1)
        return Decoded(samples, len(rows), options.batch_size
                       or auto_batch_size(models.runner, models.drafter, list(options.configs), longest, len(samples)))
    return _decode(models, options, kept, len(rows), bar)


def _decode(models: ProbeModels, options: ProbeOptions, kept: list[tuple[int, list[int]]], num_inputs: int,
            bar: Progress) -> Decoded:
    """The target's continuations of the kept prompts (each rank decodes its share, gathered in order)."""
    context, world = models.context, options.world
    reach = options.max_new_tokens + options.extra_tokens
    room = [reach if context is None else min(reach, context - len(p)) for _, p in kept]
    longest = max((len(p) + r for (_, p), r in zip(kept, room)), default=1)
    batch_size = options.batch_size or auto_batch_size(models.runner, models.drafter, list(options.configs), longest,
                                                       len(kept))
    mine = kept[world.rank::world.size]
    task = bar.add_task("target continuations", total=len(mine))
    conts = target_continuations(models.runner, [p for _, p in mine], max(room, default=0), batch_size=batch_size,
                                 temperature=options.temperature, seed=options.seed,
                                 advance=lambda n: bar.advance(task, n))
    if world.size > 1:  # every rank's share, back in prompt order
        parts = gather(world, conts)
        conts = [parts[i % world.size][i // world.size] for i in range(len(kept))]
    samples = [Sample(i, p + c[:r], len(p), min(options.max_new_tokens, r)) for (i, p), c, r in zip(kept, conts, room)]
    return Decoded(samples, num_inputs, batch_size)


def feature_samples(folder: str | Path, models: ProbeModels, options: ProbeOptions) -> Decoded:
    """One walk per run of target-produced tokens in each captured file (at most ``max_new_tokens``)."""
    width, drafter = models.target_config.hidden_size, models.drafter
    if drafter.fc.in_features % width:
        raise DraftlabError(f"the drafter's fc takes {drafter.fc.in_features} features, not a multiple of the "
                            f"target's hidden size {width}; the drafter does not belong to this target")
    files = feature_files(folder)
    samples = []
    for index, path in enumerate(files):
        sample = read_sample(path, hidden_size=width, num_aux=drafter.fc.in_features // width)
        for start, end in response_spans(sample):  # tokens after the response are not the target's
            final = None if sample.final_hidden is None else sample.final_hidden[:end]
            samples.append(Sample(index, sample.input_ids[:end], start, min(options.max_new_tokens, end - start),
                                  sample.aux[:end], final))
    return Decoded(samples, len(files), options.batch_size or CPU_BATCH)


def no_room(prompts: str | Path, count: int, context: int | None) -> DraftlabError:
    """The error for a prompts file none of whose prompts leaves room for a continuation: a probe of it
    would measure nothing (and a mean of 0.0 would read as a drafter that accepts nothing)."""
    return DraftlabError(f"every prompt ({count}) is at least as long as the target's context ({context} tokens), "
                         "so none leaves room for a continuation; use shorter prompts or a target with a longer "
                         "context", path=prompts)
