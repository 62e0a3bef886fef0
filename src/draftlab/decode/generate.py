"""``generate``: real speculative decoding over a prompts file, one prompt at a time or in batches.

Batch size 1 runs :class:`~draftlab.decode.decoder.SpeculativeDecoder` at the runtime's fastest settings
(static caches and CUDA graphs on CUDA); a larger batch runs
:class:`~draftlab.decode.batch_decoder.BatchSpeculativeDecoder` over consecutive groups of prompts (its
own batched caches: preallocated, with CUDA graphs on CUDA, for the families that have them), whose
greedy output per prompt is the same. ``--no-draft``, at any batch size (1 included: no token is read
back per step), runs the plain batched loop (:func:`~draftlab.decode.plain_decode.plain_decode`), the one
the probe's continuations run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import Progress

from draftlab.checkpoint import TargetConfig, open_checkpoint
from draftlab.compat.loadable import refuse_unloadable
from draftlab.decode.batch_decoder import BatchSpeculativeDecoder
from draftlab.decode.decoder import SpeculativeDecoder, max_cache_len
from draftlab.decode.metrics import accept_stats
from draftlab.decode.prompts import Prompt, read_prompts
from draftlab.engines.deployment import Deployment
from draftlab.engines.mtp_head import MtpServing
from draftlab.engines.sglang_flags import SpecFlags, exact_spec_flags
from draftlab.errors import DraftlabError
from draftlab.models.devices import default_dtype, model_devices, resolve_placement, synchronize
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.mtp import MtpDrafter, load_mtp, names_mtp
from draftlab.models.pair import NO_DEPLOYMENT, deployment_for, load_pair
from draftlab.models.target import TargetRunner
from draftlab.models.target_batch import compile_pays


@dataclass
class PromptResult:
    prompt_index: int  # 0-based, in file order
    output_ids: list[int]
    accept_lengths: list[int]  # one per verify cycle, bonus included, before trimming
    num_cycles: int


@dataclass
class GenerateResult:
    config: dict[str, Any]
    mean_accept_length: float  # over all cycles of all prompts; 0.0 with no cycle
    tokens_per_second: float  # generated tokens over decoding wall time (prefill included, loading excluded)
    results: list[PromptResult]
    # with --batch-size B: of the rows' cycles in their groups, the share that decoded (a group runs
    # until its slowest row is done, the others riding along); 1.0 one prompt at a time
    row_busy_fraction: float = 1.0


def generate(
    target: str | Path, drafter: str | Path | None, prompts: str | Path, *,
    steps: int | None = None, topk: int | None = None, num_draft_tokens: int | None = None,
    max_new_tokens: int = 128, temperature: float = 0.0, seed: int | None = None, no_draft: bool = False,
    dtype: str | None = None, device: str | None = None, device_map: str | None = None,
    deployment: Deployment | None = None, progress: bool = False, batch_size: int = 1, ignore_eos: bool = False, cache: str = "auto",
    mtp: MtpServing | None = None,
) -> GenerateResult:
    """Decode every prompt of ``prompts`` with ``target`` (and ``drafter`` unless ``no_draft``), the target
    feeding the drafter the aux layers ``deployment`` captures (default: the newest SGLang's).

    ``cache`` is the target's KV cache ("auto": static, with CUDA graphs, on one CUDA device for the
    families that support it; dynamic elsewhere). A static target gets a static drafter cache too,
    both sized for the longest prompt plus ``max_new_tokens`` plus one cycle.

    The target runs on ``device`` (default cpu) or split across the GPUs by ``device_map`` ("auto"),
    not both; the drafter sits with the target's input embedding.

    ``drafter`` "mtp" drafts with the target's own MTP head as ``mtp`` (default: the newest SGLang) computes
    it (:mod:`draftlab.models.mtp`), one prompt at a time.
    """
    device, device_map = resolve_placement(device, device_map)
    dtype = dtype or default_dtype(device, device_map)
    sampling = _Sampling(max_new_tokens, temperature, seed, ignore_eos)
    _check_arguments(drafter, no_draft, sampling, batch_size)
    if names_mtp(drafter) and not no_draft:
        mtp = mtp or MtpServing()
    else:
        mtp = None
    if not no_draft and mtp is None:
        deployment = deployment or deployment_for(target, drafter)
    target_cfg = TargetConfig.from_dict(open_checkpoint(target).config)
    flags = None if no_draft else exact_spec_flags(steps, topk, num_draft_tokens,
                                                   architecture=target_cfg.architecture)
    rows = _fitting_prompts(prompts, target, target_cfg)

    batched = batch_size > 1 or no_draft  # plain decoding runs the batched loop at any batch size
    if batched and cache == "auto":
        cache = "dynamic"  # the batched decoder keeps its own caches; a static one would sit unused
    max_len = max_cache_len(max((len(r.input_ids) for r in rows), default=1), max_new_tokens, flags)
    # compiling pays only for long decodes; no device: a device map, which splits the target over GPUs
    compile = compile_pays(decode_steps(len(rows), batch_size, max_new_tokens, None if batched else flags),
                           torch.device(device or "cuda"))
    if mtp is not None:
        runner, draft_model = load_mtp(target, mtp, topk=flags.topk, dtype=dtype, device=device,
                                       device_map=device_map, cache=cache, max_len=max_len)
        layers = None
    else:
        runner, draft_model, layers = _load(target, None if no_draft else drafter, deployment, dtype=dtype,
                                            device=device, device_map=device_map, cache=cache, max_len=max_len,
                                            compile=compile and not batched)

    with Progress(console=Console(stderr=True), transient=True, disable=not progress) as bar:
        task = bar.add_task("generating", total=len(rows))
        advance = partial(bar.advance, task)
        if batched:
            run = _decode_in_groups(BatchSpeculativeDecoder(runner, draft_model, flags, compile=compile), rows,
                                    batch_size, sampling, advance)
        else:
            run = _decode_one_by_one(SpeculativeDecoder(runner, draft_model, flags), rows, sampling, advance)

    config = {
        "target": str(target), "drafter": None if no_draft else str(drafter),
        **(NO_DEPLOYMENT if no_draft else mtp.describe() if mtp is not None else deployment.describe()),
        **(draft_model.describe() if mtp is not None else {"drafter_kind": None if no_draft else "eagle3"}),
        "no_draft": no_draft, "steps": flags.steps if flags else None, "topk": flags.topk if flags else None,
        "num_draft_tokens": flags.num_draft_tokens if flags else None,
        "flags_source": flags.source if flags else None, "aux_layers": layers,
        "max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed, "ignore_eos": ignore_eos,
        "dtype": dtype, "device": device, "device_map": device_map, "target_devices": model_devices(runner.model),
        "cache": runner.cache, "drafter_cache": _drafter_cache(draft_model), "num_prompts": len(rows),
        "batch_size": batch_size,
        "compile": compile,  # the steps' layer parts through torch.compile (compile_pays: long decodes on CUDA)
    }
    return GenerateResult(
        config=config,
        mean_accept_length=accept_stats(n for r in run.results for n in r.accept_lengths).mean_accept_length,
        tokens_per_second=run.tokens / run.elapsed if run.elapsed > 0 else 0.0,
        results=run.results,
        row_busy_fraction=_busy_fraction(run.group_cycles),
    )


@dataclass(frozen=True)
class _Sampling:
    """How every prompt decodes: the arguments both decoders take per call."""

    max_new_tokens: int
    temperature: float
    seed: int | None
    ignore_eos: bool


@dataclass
class _Run:
    """What the decoding loop gives back: each prompt's output and the wall time spent decoding."""

    results: list[PromptResult] = field(default_factory=list)
    elapsed: float = 0.0  # seconds in the decoders (prefill included, loading excluded)
    group_cycles: list[list[int]] = field(default_factory=list)  # batched: each group's rows' cycle counts

    @property
    def tokens(self) -> int:
        return sum(len(r.output_ids) for r in self.results)


def _check_arguments(drafter: str | Path | None, no_draft: bool, sampling: _Sampling,
                     batch_size: int) -> None:
    """Refuse what no decode can run with, before anything is read or loaded (the CLI's own checks
    cover its options; a library caller reaches here directly)."""
    if sampling.max_new_tokens < 1:
        raise DraftlabError(f"--max-new-tokens must be >= 1, got {sampling.max_new_tokens}")
    if sampling.temperature < 0:
        raise DraftlabError(f"--temperature must be >= 0, got {sampling.temperature}")
    if batch_size < 1:
        raise DraftlabError(f"--batch-size must be >= 1, got {batch_size}")
    if batch_size > 1 and not no_draft and names_mtp(drafter):
        raise DraftlabError("--drafter mtp decodes one prompt at a time; drop --batch-size (or give 1)")
    if drafter is None and not no_draft:
        raise DraftlabError("give --drafter, or --no-draft to decode with the target alone")


def _fitting_prompts(prompts: str | Path, target: str | Path, target_cfg: TargetConfig) -> list[Prompt]:
    """The prompts, each refused unless shorter than the target's context (generate leaves none out)."""
    rows = read_prompts(prompts, tokenizer_dir=target, vocab_size=target_cfg.vocab_size)
    context = target_cfg.max_position_embeddings
    for row in rows:
        if context is not None and len(row.input_ids) >= context:
            raise DraftlabError(
                f"{prompts}:{row.line}: the prompt has {len(row.input_ids)} tokens but the target's context "
                f"is {context}; shorten it"
            )
    return rows


def _load(target: str | Path, drafter: str | Path | None, deployment: Deployment | None, *, compile: bool,
          **placement: Any) -> tuple[TargetRunner, Eagle3Drafter | None, list[int] | None]:
    """The target alone (``drafter`` None), or the pair once ``draftlab check`` finds no error; with the
    drafter's aux layers. ``placement``: dtype, device, device_map, cache, max_len."""
    if drafter is None:
        return TargetRunner.load(target, aux_layers=[], **placement), None, None  # plain decoding captures none
    deployment = deployment or deployment_for(target, drafter)
    refuse_unloadable(Path(drafter), Path(target), deployment)
    pair = load_pair(target, drafter, deployment, compile=compile, **placement)
    return pair.target, pair.drafter, pair.aux_layers


def _decode_one_by_one(decoder: SpeculativeDecoder, rows: list[Prompt], sampling: _Sampling,
                       advance: Callable[[int], None]) -> _Run:
    """Each prompt through the batch-1 decoder, its commits streamed and timed."""
    run = _Run()
    for index, row in enumerate(rows):
        start = time.perf_counter()
        output, lengths = [], []
        for commit in decoder.stream(row.input_ids, **asdict(sampling)):
            output += commit.tokens
            if commit.accept_length is not None:
                lengths.append(commit.accept_length)
        run.elapsed += time.perf_counter() - start
        run.results.append(PromptResult(index, output, lengths, len(lengths)))
        advance(1)
    return run


def _decode_in_groups(decoder: BatchSpeculativeDecoder, rows: list[Prompt], batch_size: int, sampling: _Sampling,
                      advance: Callable[[int], None]) -> _Run:
    """Consecutive groups of ``batch_size`` prompts through the batched decoder, each group timed once
    its device work is done."""
    run = _Run()
    for first in range(0, len(rows), batch_size):
        group = rows[first:first + batch_size]
        start = time.perf_counter()
        done = decoder.generate([r.input_ids for r in group], **asdict(sampling))
        synchronize(decoder.runner.device)
        run.elapsed += time.perf_counter() - start
        run.results += [PromptResult(first + i, d.output_ids, d.accept_lengths, len(d.accept_lengths))
                        for i, d in enumerate(done)]
        run.group_cycles.append([len(d.accept_lengths) for d in done])
        advance(len(group))
    return run


def _drafter_cache(drafter: Eagle3Drafter | MtpDrafter | None) -> str | None:
    """The drafter's KV cache, as ``config.cache`` names the target's; None without a drafter."""
    return None if drafter is None else "static" if drafter.max_len is not None else "dynamic"


def _busy_fraction(group_cycles: list[list[int]]) -> float:
    """Of the cycles the groups' rows rode through (each group as many as its slowest row), the share
    in which a row was still decoding."""
    slots = sum(len(cycles) * max(cycles) for cycles in group_cycles)
    return sum(map(sum, group_cycles)) / slots if slots else 1.0


def decode_steps(prompts: int, batch_size: int, max_new_tokens: int, flags: SpecFlags | None) -> int:
    """The fewest target steps a run can take: one per new token of each group, or, with ``flags``
    (the batch-1 speculative decoder, whose verify is what compiles), one per cycle when every cycle
    accepts its deepest path (``steps + 1`` tokens). What ``compile_pays`` weighs: a decode compiles
    only when it takes that many steps at any accept length."""
    tokens = -(-prompts // batch_size) * max_new_tokens
    return tokens if flags is None else tokens // (flags.steps + 1)
