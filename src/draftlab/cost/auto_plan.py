"""Plan straight from a target, a drafter and prompts: probe every config, profile the pair, predict.

``draftlab plan --target T --drafter D --prompts P`` in one call: the pair is loaded once; the exact
probe (:func:`draftlab.probe.probe.probe_configs`) gives every grid config's greedy accept length from
one set of continuations; the profiler times the reference runtime's passes at exactly the sizes the
grid needs (:func:`profile_sizes`); :func:`draftlab.cost.plan.make_plan` predicts.

The default grid (:data:`draftlab.cost.plan.DEFAULT_GRID`) covers the chains SGLang users run (1 to 6 drafted tokens,
3/1/4 is SGLang's automatic choice for most architectures) and three trees: 3/4/8, 5/4/8 (SGLang's
automatic choice for Llama) and a wide 6/8/32. Every entry is valid under
:func:`draftlab.engines.sglang_flags.exact_spec_flags`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from draftlab.cost.model import SpecConfig
from draftlab.cost.plan import DEFAULT_GRID, GridEntry, Plan, make_plan
from draftlab.cost.probes import AcceptLength
from draftlab.cost.profile import Profile
from draftlab.cost.profiler import profile_costs
from draftlab.cost.runtime_workload import runtime_workload
from draftlab.cost.served import ServedCost, measure_served
from draftlab.engines.deployment import Deployment
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.errors import DraftlabError
from draftlab.models.pair import load_pair
from draftlab.probe.probe import Clock, ProbeResult, probe_configs
from draftlab.readable import regular_file

MAX_NEW_TOKENS = 128  # the probe's continuation tokens per prompt, by default


@dataclass(frozen=True)
class AutoPlan:
    """The plan, and the measurements it was made from (savable as PROFILE.json and probe JSON)."""

    plan: Plan
    profile: Profile
    probes: list[ProbeResult]  # one per grid config, in grid order
    accept_lengths: list[AcceptLength]  # the probes' means, as make_plan reads them (to re-plan)
    timings: dict[str, float]  # seconds: load_s, continuations_s, probe_s, profile_s, total_s
    deployment: Deployment | None = None  # the engine release whose captured layers fed the drafter


def default_grid() -> list[SpecConfig]:
    return [SpecConfig.parse(text) for text in DEFAULT_GRID.split(",")]


def profile_sizes(configs: Sequence[SpecConfig]) -> tuple[list[int], list[int], list[int]]:
    """Verify tokens (1 for the decode step, and each num_draft_tokens), draft rows (each topk) and
    draft-extend tokens (1 to the largest accept length, steps + 1) that planning ``configs`` reads."""
    verify = sorted({1, *(c.num_draft_tokens for c in configs)})
    rows = sorted({c.topk for c in configs})
    extend = list(range(1, max(c.steps for c in configs) + 2))
    return verify, rows, extend


def auto_plan(
    target: str | Path,
    drafter: str | Path,
    prompts: str | Path,
    *,
    grid: Sequence[SpecConfig] | None = None,
    batch_sizes: Sequence[int] = (1,),
    max_new_tokens: int = MAX_NEW_TOKENS,
    context_tokens: int = 256,
    dtype: str | None = None,
    device: str | None = None,
    deployment: Deployment | None = None,
    probe_batch_size: int | None = None,
    temperature: float = 0.0,
    seed: int | None = None,
    warmup: int = 3,
    repeats: int = 10,
    overhead_ms: float = 0.0,
    served: bool = False,
    progress: bool = True,
) -> AutoPlan:
    """Probe every config of ``grid`` (default :data:`~draftlab.cost.plan.DEFAULT_GRID`) on
    ``prompts``, profile the pair at ``batch_sizes`` and predict. ``overhead_ms`` is a fixed
    per-cycle cost to add (an engine's own work between passes, which the timed passes leave out).
    The target feeds the drafter the aux layers ``deployment`` captures (default: the newest SGLang's).
    At ``temperature`` > 0 the accept lengths are the probe's estimates for sampled decoding (``seed``
    samples the continuations). ``device`` defaults to CUDA when there is one, else the CPU; ``dtype``
    to bfloat16 on CUDA, float32 on the CPU. With ``served`` the pair's target is also measured through
    ``draftlab serve`` and the plan predicts the server too (:mod:`draftlab.cost.served`; requests of
    ``max_new_tokens``)."""
    configs = list(dict.fromkeys(grid if grid is not None else default_grid()))
    if not configs:
        raise DraftlabError("--grid is empty; give configs like 3/1/4,5/4/8")
    if not batch_sizes or min(batch_sizes) < 1:
        raise DraftlabError(f"batch sizes must be positive integers, got {list(batch_sizes)}")
    if overhead_ms < 0 or warmup < 0 or repeats < 1:
        raise DraftlabError(f"need overhead >= 0 ms, warmup >= 0 and repeats >= 1; got {overhead_ms}, {warmup} "
                            f"and {repeats}")
    regular_file(prompts, "prompts file not found")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or ("float32" if device == "cpu" else "bfloat16")
    clock = Clock()
    pair = load_pair(target, drafter, deployment, dtype=dtype, device=device)
    clock.lap("load_s")
    _check_context(pair.target.config.max_position_embeddings, context_tokens, configs)

    probed = probe_configs(
        pair, target, prompts, [exact_spec_flags(c.steps, c.topk, c.num_draft_tokens) for c in configs],
        max_new_tokens=max_new_tokens, batch_size=probe_batch_size, temperature=temperature, seed=seed,
        progress=progress, clock=clock,
    )
    for result in probed:
        result.config.update(pair.deployment.describe())
    accept = [probe_accept_length(c, r, prompts) for c, r in zip(configs, probed)]

    verify, rows, extend = profile_sizes(configs)
    workload = runtime_workload(pair.target, pair.drafter, context_tokens=context_tokens,
                                target_name=str(target), drafter_name=str(drafter))
    profile = profile_costs(workload, batch_sizes=sorted(set(batch_sizes)), verify_tokens=verify,
                            draft_rows=rows, extend_tokens=extend, warmup=warmup, repeats=repeats,
                            overhead_ms=overhead_ms, progress=progress)
    clock.lap("profile_s")
    if served:
        profile = replace(profile, served=_measure_served(target, prompts, batch_sizes, max_new_tokens, device, dtype))
        clock.lap("served_s")
    plan = make_plan(profile, accept, grid=[GridEntry(c) for c in configs], batch_sizes=list(batch_sizes))
    return AutoPlan(plan=plan, profile=profile, probes=probed, accept_lengths=accept, timings=clock.timings(),
                    deployment=pair.deployment)


def _measure_served(target: str | Path, prompts: str | Path, batch_sizes: Sequence[int], request_tokens: int,
                    device: str, dtype: str) -> list[ServedCost]:
    """:func:`~draftlab.cost.served.measure_served` with the server's log in a temporary file, kept (and
    named in the error) only if the calibration fails."""
    with tempfile.NamedTemporaryFile(prefix="draftlab-served-", suffix=".log", delete=False) as f:
        log = Path(f.name)
    costs = measure_served(target, prompts, sorted(set(batch_sizes)), request_tokens, device=device, dtype=dtype,
                           threads=torch.get_num_threads(), log=log)
    log.unlink(missing_ok=True)
    return costs


def probe_accept_length(config: SpecConfig, result: ProbeResult, prompts: str | Path) -> AcceptLength:
    measured = any(r.expected_accept_length is not None for r in result.results) if result.estimate \
        else sum(r.num_cycles for r in result.results) > 0
    if not measured:
        raise DraftlabError(
            f"config {config.label} ran no verify cycle on these prompts (each continuation ends at once "
            "or the prompts fill the context); give a larger --max-new-tokens or other prompts",
            path=prompts,
        )
    return AcceptLength(config, result.mean_accept_length, source=f"probe {config.label}")


def _check_context(context: int | None, context_tokens: int, configs: Sequence[SpecConfig]) -> None:
    """Every timed pass runs after ``context_tokens`` cached tokens; the longest must fit the model."""
    longest = max(c.num_draft_tokens for c in configs)
    if context_tokens < 1:
        raise DraftlabError(f"--context must be >= 1, got {context_tokens}")
    if context is not None and context_tokens + longest > context:
        raise DraftlabError(
            f"--context {context_tokens} plus a {longest}-token verify passes the target's "
            f"{context}-token context; use --context {context - longest} or less"
        )
