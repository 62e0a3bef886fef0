"""``probe``: the exact greedy accept lengths of a drafter on a target and data, from one target pass.

    continuations (target greedy, or given) -> one batched target pass over prompt + continuation
    (aux features, target argmax) -> the drafter for every cycle start at once (:mod:`.drafts`)
    -> the decoder's walk over the continuation (:mod:`.walk`)

At temperature 0, with the target's own greedy continuation, the per-prompt accept lengths are the
ones ``draftlab generate`` reports. With given continuations that the target would not have
produced, the share of positions where the target disagrees is reported: the figures then describe
that text, not what the target would generate. At temperature > 0 the continuations are sampled and
each cycle start's draft tree gives an expected accept length instead (:mod:`.sampling`, an estimate).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import Progress

from draftlab.acceptance.by_context import accept_length_by_context
from draftlab.checkpoint import TargetConfig, open_checkpoint
from draftlab.decode.metrics import accept_stats
from draftlab.decode.prompts import read_prompts
from draftlab.distributed import World, gather, init_world
from draftlab.engines.deployment import Deployment
from draftlab.engines.mtp_head import MtpServing
from draftlab.engines.sglang_flags import SpecFlags, exact_spec_flags
from draftlab.errors import DraftlabError
from draftlab.models.devices import default_dtype, model_devices, resolve_placement
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.graphs import captures
from draftlab.models.mtp import MTP, load_mtp, names_mtp
from draftlab.models.pair import LoadedPair, deployment_for
from draftlab.models.target import TargetRunner
from draftlab.probe.by_context import context_limits
from draftlab.probe.drafts import accepted_drafts, drafted_trees
from draftlab.probe.heads import TargetHeads
from draftlab.probe.options import ProbeModels, ProbeOptions, check_run
from draftlab.probe.samples import Decoded, Sample, feature_samples, live_samples, no_room
from draftlab.probe.sampling import expected_accept_length, expected_by_step, expected_histogram, reach_by_depth
from draftlab.probe.walk import acceptance_by_step, cycle_roots, decoder_walk, histogram_list, per_position_lengths


@dataclass
class ProbePromptResult:
    prompt_index: int  # 0-based, in file order
    accept_lengths: list[int]  # one per verify cycle, bonus included, as generate reports them
    num_cycles: int
    continuation_tokens: int  # tokens the walk covered (max_new_tokens, or the given response)
    target_disagreement: float | None  # share of those tokens that are not the target's argmax
    expected_accept_length: float | None = None  # temperature > 0: the estimate (accept_lengths stay empty)


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
    estimate: bool = False  # temperature > 0: expected figures along the text, not an exact count
    timings: dict[str, float] | None = None  # seconds: load_s, continuations_s, probe_s, total_s
    # per bucket of cycle root positions: {from, to, cycles, mean_accept_length, past} (acceptance/by_context.py);
    # empty for the temperature > 0 estimate, which has no cycles
    accept_length_by_context: list[dict[str, Any]] = field(default_factory=list)


def probe(target: str | Path, drafter: str | Path, prompts: str | Path | None = None, *, steps: int | None = None,
          topk: int | None = None, num_draft_tokens: int | None = None, max_new_tokens: int = 128,
          responses: str = "generate", features: str | Path | None = None, temperature: float = 0.0,
          seed: int | None = None, batch_size: int | None = None, dtype: str | None = None,
          device: str | None = None,
          device_map: str | None = None, deployment: Deployment | None = None, progress: bool = False,
          mtp: MtpServing | None = None) -> ProbeResult:
    """Exact greedy accept lengths of ``drafter`` on ``target`` over ``prompts``, or over the captured
    hidden states in ``features`` (then ``target`` supplies only its config, embedding and lm_head).
    ``deployment`` (default: the newest SGLang's) names the aux layers the target feeds the drafter.

    At ``temperature`` > 0 the figures are the expected acceptance of the engines' top-k drafts
    verified by sampling, along the text (:mod:`.sampling`), an estimate, and the continuations are
    sampled.

    A live target runs on ``device`` (default cpu) or split across the GPUs by ``device_map``
    ("auto"), not both; the drafter sits with the target's input embedding.

    Under ``torchrun`` each rank decodes and probes its share of the prompts (on its own GPU with
    ``--device cuda``) and every rank returns the whole result, the same one a single process gives
    (greedy; sampled continuations differ with the split).

    ``drafter`` "mtp": the target's own MTP head as ``mtp`` (default: the newest SGLang) computes it, over a
    live target (:mod:`draftlab.models.mtp`)."""
    if names_mtp(drafter):
        return _probe_mtp(target, prompts, mtp or MtpServing(), steps=steps, topk=topk,
                          num_draft_tokens=num_draft_tokens, max_new_tokens=max_new_tokens, responses=responses,
                          features=features, temperature=temperature, seed=seed, batch_size=batch_size, dtype=dtype,
                          device=device, device_map=device_map, progress=progress)
    device, device_map = resolve_placement(device, device_map)
    dtype = dtype or default_dtype(device, device_map)
    world = init_world(device or "cpu")
    if world.size > 1:
        device, progress = _rank_device(world, device, device_map), progress and world.main
    _check_target(device_map, features)
    check_run(responses, max_new_tokens, batch_size)
    _check_text(prompts, features, temperature)
    target_cfg = TargetConfig.from_dict(open_checkpoint(target).config)
    flags = exact_spec_flags(steps, topk, num_draft_tokens, architecture=target_cfg.architecture)
    deployment = deployment or deployment_for(target, drafter)
    layers = list(deployment.aux.layers)
    options = ProbeOptions((flags,), max_new_tokens, responses, batch_size, temperature, seed, world=world)

    if features is None:
        check_room(prompts, target, target_cfg)  # before any model loads
    clock = Clock()
    with Progress(console=Console(stderr=True), transient=True, disable=not progress) as bar:
        if features is None:
            runner = TargetRunner.load(target, aux_layers=layers, dtype=dtype, device=device, device_map=device_map)
            models = ProbeModels.live(runner, Eagle3Drafter.load(drafter, target=runner, dtype=dtype,
                                                                 device=str(runner.device),
                                                                 windows=deployment.windows), target_cfg)
            clock.lap("load_s")
            decoded = live_samples(models, options, target, prompts, bar)
        else:
            heads = TargetHeads(target, dtype=dtype, device=device)
            models = ProbeModels(Eagle3Drafter.load(drafter, target=heads, dtype=dtype, device=device,
                                                    windows=deployment.windows), None,
                                 heads.lm_head, heads.eos_token_ids, target_cfg)
            clock.lap("load_s")
            decoded = feature_samples(features, models, options)
        clock.lap("continuations_s")
        config = {
            "target": str(target), "drafter": str(drafter), **deployment.describe(), "drafter_kind": "eagle3",
            "aux_layers": layers,
            "responses": "features" if features is not None else responses,
            "features": None if features is None else str(features), "dtype": dtype, "device": device,
            "device_map": device_map,
            "target_devices": None if models.runner is None else model_devices(models.runner.model), "seed": seed,
            **({"ranks": world.size} if world.size > 1 else {}),
        }
        result = _run(models, options, decoded, config, bar)
    clock.lap("probe_s")
    return replace(result, timings=clock.timings())


def _probe_mtp(target: str | Path, prompts: str | Path | None, mtp: MtpServing, *, steps: int | None,
               topk: int | None, num_draft_tokens: int | None, max_new_tokens: int, responses: str,
               features: str | Path | None, temperature: float, seed: int | None, batch_size: int | None,
               dtype: str | None, device: str | None, device_map: str | None, progress: bool) -> ProbeResult:
    """:func:`probe` with the target's own MTP head: one process, a live target (the head reads its final
    hidden state, which captured features do not hold)."""
    if features is not None:
        raise DraftlabError("--drafter mtp runs the live target (its MTP head reads the final hidden state); "
                            "give --prompts instead of --features")
    device, device_map = resolve_placement(device, device_map)
    dtype = dtype or default_dtype(device, device_map)
    check_run(responses, max_new_tokens, batch_size)
    _check_text(prompts, None, temperature)
    target_cfg = TargetConfig.from_dict(open_checkpoint(target).config)
    flags = exact_spec_flags(steps, topk, num_draft_tokens, architecture=target_cfg.architecture)
    options = ProbeOptions((flags,), max_new_tokens, responses, batch_size, temperature, seed)
    check_room(prompts, target, target_cfg)
    clock = Clock()
    with Progress(console=Console(stderr=True), transient=True, disable=not progress) as bar:
        runner, head = load_mtp(target, mtp, topk=flags.topk, dtype=dtype, device=device, device_map=device_map)
        models = ProbeModels.live(runner, head, target_cfg)
        clock.lap("load_s")
        decoded = live_samples(models, options, target, prompts, bar)
        clock.lap("continuations_s")
        config = {"target": str(target), "drafter": MTP, **mtp.describe(), **head.describe(),
                  "aux_layers": None, "responses": responses, "features": None, "dtype": dtype, "device": device,
                  "device_map": device_map, "target_devices": model_devices(runner.model), "seed": seed}
        result = _run(models, options, decoded, config, bar)
    clock.lap("probe_s")
    return replace(result, timings=clock.timings())


def _rank_device(world: World, device: str | None, device_map: str | None) -> str | None:
    """Under torchrun: each rank's own GPU for ``--device cuda``; a device map, which would split every
    rank's target over the same GPUs, is refused."""
    if device_map is not None:
        raise DraftlabError("under torchrun every rank holds the whole target; drop --device-map (or run one "
                            "process that splits it)")
    return f"cuda:{world.local_rank}" if device == "cuda" else device


def _check_target(device_map: str | None, features: str | Path | None) -> None:
    """Refuse a placement the target cannot run with."""
    if device_map is not None and features is not None:
        raise DraftlabError("--device-map splits a live target; with --features only its embedding and lm_head "
                            "load, so use --device")


def _check_text(prompts: str | Path | None, features: str | Path | None, temperature: float) -> None:
    """Refuse a run with no text, or two, to walk, or a negative temperature."""
    if (prompts is None) == (features is None):
        raise DraftlabError("give --prompts (a live target) or --features (captured hidden states), not both")
    if temperature < 0:
        raise DraftlabError(f"--temperature must be >= 0, got {temperature}")


def probe_sequences(runner: TargetRunner, drafter: Eagle3Drafter, prompts: list[list[int]],
                    continuations: list[list[int]], flags: SpecFlags, *, max_new_tokens: int, batch_size: int = 4,
                    progress: bool = False) -> ProbeResult:
    """The probe over models already in memory and given continuations (benchmarks, notebooks)."""
    options = ProbeOptions((flags,), max_new_tokens, "given", batch_size)
    samples = [Sample(i, p + c, len(p), min(max_new_tokens, len(c)))
               for i, (p, c) in enumerate(zip(prompts, continuations))]
    with Progress(console=Console(stderr=True), transient=True, disable=not progress) as bar:
        return _run(ProbeModels.live(runner, drafter), options, Decoded(samples, len(prompts), batch_size),
                    {"responses": "given"}, bar)


def decode_continuations(pair: LoadedPair, target_dir: str | Path, prompts: str | Path, configs: Sequence[SpecFlags],
                         *, max_new_tokens: int = 128, lookahead: int = 0, responses: str = "generate",
                         batch_size: int | None = None, temperature: float = 0.0, seed: int | None = None,
                         progress: bool = False) -> Decoded:
    """The continuations :func:`probe_configs` walks, decoded once; ``lookahead`` extends them past
    ``max_new_tokens`` by at least that many tokens (a model-free drafter's longest proposal, say)."""
    check_run(responses, max_new_tokens, batch_size)
    options = ProbeOptions(tuple(configs), max_new_tokens, responses, batch_size, temperature, seed, lookahead)
    with Progress(console=Console(stderr=True), transient=True, disable=not progress) as bar:
        return live_samples(ProbeModels.live(pair.target, pair.drafter), options, target_dir, prompts, bar)


def probe_configs(pair: LoadedPair, target_dir: str | Path, prompts: str | Path, configs: Sequence[SpecFlags], *,
                  max_new_tokens: int = 128, responses: str = "generate", batch_size: int | None = None,
                  temperature: float = 0.0, seed: int | None = None, progress: bool = False,
                  clock: Clock | None = None, decoded: Decoded | None = None) -> list[ProbeResult]:
    """:func:`probe` for several configs at once on a pair already in memory (live target).

    The continuations are decoded once (long enough for the config with the most steps; sampled at
    ``temperature`` > 0) and the target runs once per batch of prompts; only the drafter and the walk
    (or the T > 0 estimate) run per config. Each result is the one :func:`probe` gives for that config
    alone. ``target_dir`` supplies the tokenizer for text prompts. The results' ``timings`` are laps of
    ``clock`` (a caller's that timed the load, say). ``decoded`` (from :func:`decode_continuations`
    with the same arguments) skips the decoding.
    """
    if temperature < 0:
        raise DraftlabError(f"--temperature must be >= 0, got {temperature}")
    if not configs:
        raise DraftlabError("no speculation configs to probe; give at least one steps/topk/num_draft_tokens")
    check_run(responses, max_new_tokens, batch_size)
    models = ProbeModels.live(pair.target, pair.drafter)
    for flags in configs:
        _check_topk(models.drafter, flags)
    options = ProbeOptions(tuple(configs), max_new_tokens, responses, batch_size, temperature, seed)
    clock = clock or Clock()
    with Progress(console=Console(stderr=True), transient=True, disable=not progress) as bar:
        if decoded is None:
            decoded = live_samples(models, options, target_dir, prompts, bar)
            clock.lap("continuations_s")
        runner = pair.target
        config = {"target": str(target_dir), "aux_layers": pair.aux_layers, "responses": responses,
                  "features": None, "dtype": str(runner.dtype).removeprefix("torch."), "device": str(runner.device),
                  "seed": seed}
        run = _run_sampled if temperature > 0 else _run_greedy
        results = run(models, options, decoded, config, bar)
    clock.lap("probe_s")
    timings = clock.timings()  # the configs share one set of continuations and target passes
    return [replace(r, timings=timings) for r in results]


class Clock:
    """Wall-clock seconds of a run's phases, each lap after the GPU's queued work is done."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}
        self.captured = captures()

    def lap(self, name: str) -> None:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        now = time.perf_counter()
        self.laps[name] = round(now - self.last, 4)
        self.last = now

    def timings(self) -> dict[str, float]:
        """The laps and their total; on CUDA also the part of them spent capturing graphs
        (``graph_capture_s``), of which their warm-up runs (``graph_warmup_s``: where kernels are built
        on first use), and the graphs captured (``graphs_captured``)."""
        captured = captures() - self.captured
        return {**self.laps, "total_s": round(self.last - self.start, 4),
                **({"graph_capture_s": round(captured.seconds, 4), "graph_warmup_s": round(captured.warmup_seconds, 4),
                    "graphs_captured": captured.graphs} if captured.graphs else {})}


def _check_topk(drafter: Eagle3Drafter, flags: SpecFlags) -> None:
    if flags.topk > drafter.config.draft_vocab_size:
        raise DraftlabError(f"--topk {flags.topk} is larger than the drafter's vocabulary "
                            f"({drafter.config.draft_vocab_size} tokens); use a smaller --topk")


def _run(models: ProbeModels, options: ProbeOptions, decoded: Decoded, config: dict[str, Any],
         bar: Progress) -> ProbeResult:
    """Probe every sample with the one config of ``options``, walk each continuation, gather the figures."""
    _check_topk(models.drafter, options.configs[0])
    run = _run_sampled if options.temperature > 0 else _run_greedy
    return run(models, options, decoded, config, bar)[0]


def _run_greedy(models: ProbeModels, options: ProbeOptions, decoded: Decoded, config: dict[str, Any],
                bar: Progress) -> list[ProbeResult]:
    """Every config over the same samples: one target pass per batch, then the drafter and walk per config
    (each rank over its share of the samples, the figures then gathered from every rank)."""
    configs, world = options.configs, options.world
    mine = decoded.samples[world.rank::world.size]
    task = bar.add_task("probing", total=len(mine))
    per_prompt: list[dict[int, ProbePromptResult]] = [{} for _ in configs]
    per_position: list[list[int]] = [[] for _ in configs]
    cycles: list[list[tuple[int, int]]] = [[] for _ in configs]  # (root position, accept length)
    disagree, judged = 0, 0
    for batch, accepted_by_config, argmax in _probe_batches(models, configs, mine, decoded.batch_size):
        for row, (sample, top) in enumerate(zip(batch, argmax)):
            span = range(sample.prompt_len, sample.prompt_len + sample.max_new_tokens)
            off = None if top is None else sum(int(top[i - 1]) != sample.tokens[i] for i in span)
            if off is not None:
                disagree, judged = disagree + off, judged + len(span)
            for c, flags in enumerate(configs):
                acc = accepted_by_config[c][row]
                lengths = decoder_walk(acc, sample.tokens, sample.prompt_len, sample.max_new_tokens,
                                       steps=flags.steps, eos=models.eos, context=models.context)
                per_position[c] += per_position_lengths(acc, sample.prompt_len, sample.max_new_tokens)
                cycles[c] += zip(cycle_roots(sample.prompt_len, lengths), lengths)
                _add(per_prompt[c], sample.index, lengths, len(span), off)
        bar.advance(task, len(batch))
    if world.size > 1:
        parts = gather(world, (per_prompt, per_position, disagree, judged, cycles))
        per_prompt = [{i: r for part in parts for i, r in part[0][c].items()} for c in range(len(configs))]
        per_position = [[n for part in parts for n in part[1][c]] for c in range(len(configs))]
        disagree, judged = sum(part[2] for part in parts), sum(part[3] for part in parts)
        cycles = [[x for part in parts for x in part[4][c]] for c in range(len(configs))]

    out = []
    limits = context_limits(models.drafter)
    for flags, prompts_of, positions, walked in zip(configs, per_prompt, per_position, cycles):
        results = [prompts_of[i] for i in sorted(prompts_of)]
        all_lengths = [n for r in results for n in r.accept_lengths]
        out.append(ProbeResult(
            config=_result_config(config, flags, options, decoded, temperature=0.0),
            mean_accept_length=accept_stats(all_lengths).mean_accept_length,
            acceptance_by_step=acceptance_by_step(all_lengths, flags.steps),
            accept_length_histogram=histogram_list(all_lengths, flags.steps),
            per_position_accept_length=accept_stats(positions).mean_accept_length,
            vocab_bound=_vocab_bound(models.drafter, decoded.samples),
            target_disagreement=disagree / judged if judged else None,
            skipped_prompts=decoded.num_inputs - len(results),
            results=results,
            accept_length_by_context=accept_length_by_context(walked, limits=limits),
        ))
    return out


def _result_config(config: dict[str, Any], flags: SpecFlags, options: ProbeOptions, decoded: Decoded, *,
                   temperature: float) -> dict[str, Any]:
    """One config's result: the run's settings, then that config's flags and what the run walked."""
    return {**config, "steps": flags.steps, "topk": flags.topk, "num_draft_tokens": flags.num_draft_tokens,
            "flags_source": flags.source, "max_new_tokens": options.max_new_tokens, "temperature": temperature,
            "batch_size": decoded.batch_size, "num_prompts": decoded.num_inputs}


def check_room(prompts: str | Path, target: str | Path, target_cfg: TargetConfig) -> None:
    """Refuse a prompts file none of whose prompts is shorter than the target's context."""
    rows = read_prompts(prompts, tokenizer_dir=target, vocab_size=target_cfg.vocab_size)
    context = target_cfg.max_position_embeddings
    if rows and context is not None and all(len(row.input_ids) >= context for row in rows):
        raise no_room(prompts, len(rows), context)


def _add(per_prompt: dict[int, ProbePromptResult], index: int, lengths: list[int], tokens: int,
         off: int | None) -> None:
    """Merge one walk into its prompt's result (a captured file may hold several responses)."""
    if index not in per_prompt:
        per_prompt[index] = ProbePromptResult(index, [], 0, 0, None if off is None else 0.0)
    r = per_prompt[index]
    before = r.continuation_tokens
    r.accept_lengths += lengths
    r.num_cycles = len(r.accept_lengths)
    r.continuation_tokens += tokens
    if off is not None:
        r.target_disagreement = ((r.target_disagreement or 0.0) * before + off) / r.continuation_tokens


def _run_sampled(models: ProbeModels, options: ProbeOptions, decoded: Decoded, config: dict[str, Any],
                 bar: Progress) -> list[ProbeResult]:
    """Temperature > 0: every config's expected acceptance of the draft tree rooted at every continuation
    token; the target runs once per batch of samples (each rank's share, gathered)."""
    configs, world, samples, lm_head = options.configs, options.world, decoded.samples, models.lm_head
    mine = samples[world.rank::world.size]
    task = bar.add_task("probing (expected acceptance)", total=len(mine))
    per_prompt: list[list[ProbePromptResult]] = [[] for _ in configs]
    rows: list[list[torch.Tensor]] = [[] for _ in configs]
    for start in range(0, len(mine), decoded.batch_size):
        batch = mine[start:start + decoded.batch_size]
        tokens, aux, hidden = _batch_inputs(models.runner, batch)
        if hidden is None:
            raise DraftlabError("temperature > 0 needs the target's distributions: captured features without a "
                                "final hidden state cannot give them")
        hidden = hidden.to(lm_head.weight.device, lm_head.weight.dtype)
        last = hidden.shape[1] - 1
        for c, flags in enumerate(configs):
            reach = reach_by_depth(drafted_trees(models.drafter, tokens, aux, flags), flags.num_draft_tokens,
                                   lambda pos: lm_head(hidden[:, pos.clamp(max=last).to(hidden.device)]),
                                   options.temperature)
            for row, sample in enumerate(batch):
                a = reach[row, sample.prompt_len - 1:sample.prompt_len + sample.max_new_tokens - 2].cpu()
                known = len(sample.tokens) - 1 - torch.arange(sample.prompt_len - 1,
                                                              sample.prompt_len - 1 + a.shape[0])
                a = a * (torch.arange(1, flags.steps + 1)[None] <= known[:, None])  # no target beyond the text
                rows[c].append(a)
                per_prompt[c].append(ProbePromptResult(sample.index, [], 0, sample.max_new_tokens, None,
                                                       float(expected_accept_length(a).mean()) if a.numel() else None))
        bar.advance(task, len(batch))
    if world.size > 1:  # back in prompt order: rows are per sample, so they follow their prompts
        parts = gather(world, (per_prompt, [[r.cpu() for r in c] for c in rows]))
        order = [i for r in range(world.size) for i in range(len(samples))[r::world.size]]
        for c in range(len(configs)):
            merged = sorted(zip(order, [p for part in parts for p in part[0][c]],
                                [a for part in parts for a in part[1][c]]), key=lambda x: x[0])
            per_prompt[c], rows[c] = [m[1] for m in merged], [m[2] for m in merged]
    bound = _vocab_bound(models.drafter, samples)
    results = []
    for flags, config_rows, prompts in zip(configs, rows, per_prompt):
        reach = torch.cat(config_rows) if config_rows else torch.zeros(0, flags.steps)
        mean = float(expected_accept_length(reach).mean()) if reach.numel() else 0.0
        results.append(ProbeResult(
            config=_result_config(config, flags, options, decoded, temperature=options.temperature),
            mean_accept_length=mean, acceptance_by_step=expected_by_step(reach),
            accept_length_histogram=expected_histogram(reach), per_position_accept_length=mean,
            vocab_bound=bound, target_disagreement=None, skipped_prompts=decoded.num_inputs - len(prompts),
            results=prompts, estimate=True,
        ))
    return results


def _vocab_bound(drafter: Eagle3Drafter, samples: list[Sample]) -> float:
    ids = set(drafter.to_target_ids(torch.arange(drafter.config.draft_vocab_size)).tolist())
    tokens = [s.tokens[i] for s in samples for i in range(s.prompt_len + 1, s.prompt_len + s.max_new_tokens)]
    return sum(t in ids for t in tokens) / len(tokens) if tokens else 0.0


def _batch_inputs(runner: TargetRunner | None, batch: list[Sample]
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Right-padded tokens [B, L], aux features and final hidden states (live target or captured)."""
    width = max(len(s.tokens) for s in batch)
    tokens = torch.zeros(len(batch), width, dtype=torch.long)
    for row, s in enumerate(batch):
        tokens[row, :len(s.tokens)] = torch.tensor(s.tokens)
    if runner is not None:
        step = runner.forward_batch(tokens)
        return tokens, step.aux, step.hidden
    aux = _pad([s.aux for s in batch], width)
    hidden = _pad([s.final_hidden for s in batch], width) if all(s.final_hidden is not None for s in batch) else None
    return tokens, aux, hidden


def _probe_batches(models: ProbeModels, configs: Sequence[SpecFlags], samples: list[Sample], batch_size: int
                   ) -> Iterator[tuple[list[Sample], list[list[list[int]]], list[list[int] | None]]]:
    """Per batch: for each config, the drafts each cycle start accepts; and the target's argmax at every
    position (None for captured features without a final state). The target runs once per batch."""
    look_ahead, lm_head = max(flags.steps for flags in configs) + 1, models.lm_head
    for start in range(0, len(samples), batch_size):
        batch = samples[start:start + batch_size]
        tokens, aux, hidden = _batch_inputs(models.runner, batch)
        width = tokens.shape[1]
        argmax = None if hidden is None else _argmax(lm_head, hidden.to(lm_head.weight.device, lm_head.weight.dtype))
        truth = torch.full((len(batch), width + look_ahead), -1, dtype=torch.long)
        for row, s in enumerate(batch):  # the known text, then the target's next token after its end
            truth[row, :len(s.tokens)] = tokens[row, :len(s.tokens)]
            if argmax is not None:
                truth[row, len(s.tokens)] = argmax[row, len(s.tokens) - 1]
        accepted = [accepted_drafts(models.drafter, tokens, aux, truth, flags).tolist() for flags in configs]
        yield batch, accepted, argmax.tolist() if argmax is not None else [None] * len(batch)


def _pad(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    out = rows[0].new_zeros(len(rows), width, rows[0].shape[-1])
    for i, row in enumerate(rows):
        out[i, :row.shape[0]] = row
    return out


def _argmax(lm_head: torch.nn.Module, hidden: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """The target's greedy token at every position, [B, L] on the CPU, computed in chunks of positions."""
    parts = [lm_head(hidden[:, i:i + chunk]).argmax(-1).cpu() for i in range(0, hidden.shape[1], chunk)]
    return torch.cat(parts, dim=1)
