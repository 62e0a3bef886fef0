"""The planner: predicted tokens per second for every speculation config and batch size.

Given measured costs (:mod:`draftlab.cost.profile`) and accept lengths (probe results, or values
given with the grid), it predicts each config's cycle and throughput with
:mod:`draftlab.cost.model`, picks the best config per batch size and says in plain words whether
speculation pays off on this hardware and where a cycle's time goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from draftlab.cost import model
from draftlab.cost.model import SpecConfig
from draftlab.cost.probes import AcceptLength
from draftlab.cost.profile import CostTable, ModelInfo, Profile
from draftlab.errors import DraftlabError

# Chains of 1 to 6 drafted tokens and three trees (5/4/8 is SGLang's automatic choice for Llama), all
# valid under engines.sglang_flags.exact_spec_flags: what `plan --target` probes without --grid.
DEFAULT_GRID = "1/1/2,2/1/3,3/1/4,4/1/5,5/1/6,6/1/7,3/4/8,5/4/8,6/8/32"


@dataclass(frozen=True)
class GridEntry:
    """A config to plan, with an accept length to assume (None: take the probe's)."""

    config: SpecConfig
    accept_length: float | None = None


@dataclass(frozen=True)
class ConfigPlan:
    """The prediction for one config at one batch size; times in milliseconds."""

    steps: int
    topk: int
    num_draft_tokens: int
    batch_size: int
    accept_length: float
    accept_length_source: str
    cycle_ms: float
    tokens_per_second: float
    speedup: float
    break_even_accept_length: float
    draft_extend_ms: float
    draft_steps_ms: float
    verify_ms: float
    allreduce_ms: float
    overhead_ms: float
    method: str = "eagle3"  # "mtp" (the target's own MTP head), or a model-free method ("ngram", "suffix"): steps is
    # then its k
    served_cycle_ms: float | None = None  # the cycle as draftlab serve runs it (profile from plan --served)
    served_tokens_per_second: float | None = None  # draftlab serve's output tok/s (draftlab.cost.served)

    @property
    def label(self) -> str:
        """``3/1/4`` for the drafter, ``mtp 3/1/4`` for the target's own MTP head, ``ngram k=4``."""
        shape = f"{self.steps}/{self.topk}/{self.num_draft_tokens}"
        if self.method == "mtp":
            return f"mtp {shape}"
        return shape if self.method == "eagle3" else f"{self.method} k={self.steps}"


@dataclass(frozen=True)
class ModelFreeEntry:
    """A model-free method as a plan candidate: no drafter passes, a verify over the drafted tokens."""

    method: str  # "ngram" or "suffix"
    k: int  # num_speculative_tokens
    accept_length: float
    drafted: float  # mean tokens proposed per cycle (<= k; 0 when nothing matched)
    source: str


@dataclass(frozen=True)
class Plan:
    """Predictions for a grid of configs at each batch size, the best per batch, a verdict."""

    baseline_tokens_per_second: dict[int, float]
    decode_ms: dict[int, float]
    configs: list[ConfigPlan]
    best: dict[int, ConfigPlan]
    verdict: str
    served_baseline_tokens_per_second: dict[int, float] | None = None  # draftlab serve without speculation
    served_request_tokens: int | None = None  # new tokens per request the served predictions are for


def parse_grid(text: str) -> list[GridEntry]:
    """Read ``"3/1/4,5/4/8:2.9"``: configs, each optionally with an accept length to assume."""
    entries = []
    for part in text.split(","):
        cfg, sep, al = part.partition(":")
        config = SpecConfig.parse(cfg)
        accept = None
        if sep:
            try:
                accept = float(al)
            except ValueError:
                raise DraftlabError(
                    f"--grid entry {part.strip()!r}: accept length {al.strip()!r} is not a number"
                ) from None
            if not 1 <= accept <= config.steps + 1:
                raise DraftlabError(
                    f"--grid entry {part.strip()!r}: an accept length for {config.label} lies "
                    f"between 1 and {config.steps + 1}"
                )
        entries.append(GridEntry(config, accept))
    return entries


def make_plan(
    profile: Profile,
    probes: list[AcceptLength],
    *,
    grid: list[GridEntry] | None = None,
    batch_sizes: list[int] | None = None,
    model_free: Sequence[ModelFreeEntry] = (),
    mtp: Sequence[AcceptLength] = (),
) -> Plan:
    """Predict every grid config (default: the probed configs) at every batch size, and each
    ``model_free`` candidate beside them, and each config ``mtp`` gives an accept length for drafted by
    the target's own MTP head, at the profiled cost of its own passes and, where its cycles were timed, its
    decoder's own per-cycle work (method "mtp")."""
    if not profile.verify:
        raise DraftlabError(
            "the profile has no target measurements; run draftlab profile with --target"
        )
    _check_same_model(profile.model, [*probes, *mtp])
    if mtp and not profile.mtp_draft_extend:
        raise DraftlabError(f"{mtp[0].source} is the target's own MTP head, but the profile holds no MTP pass; "
                            "profile it with draftlab profile --drafter mtp")
    measured = profile.batch_sizes
    batch_sizes = sorted(set(batch_sizes or measured))
    for b in batch_sizes:
        if b not in measured:
            raise DraftlabError(
                f"batch size {b} was not profiled (profiled: {_join(measured)}); "
                "re-run draftlab profile with it in --batch-sizes"
            )
    for p in probes:
        if p.batch_size is not None and p.batch_size not in measured:
            raise DraftlabError(
                f"{p.source}: the probe is for batch size {p.batch_size}, but the costs were "
                f"profiled at batch sizes {_join(measured)}; profile batch {p.batch_size}"
            )
    if grid is None:
        grid = [GridEntry(c) for c in dict.fromkeys(p.config for p in probes)]
    if not grid and not mtp:
        raise DraftlabError(
            "nothing to plan: give --probe results or --grid configs with accept lengths"
        )
    table = CostTable.of(profile)
    unserved = [b for b in batch_sizes if table.served and b not in table.served]
    if unserved:
        raise DraftlabError(f"batch size {unserved[0]} was not measured through draftlab serve (served: "
                            f"{_join(sorted(table.served))}); re-run plan --served with it in --batch-sizes")
    heads = CostTable.of(profile, mtp=True) if mtp else None
    # plain decoding's own work: measured with the drafter's decoder, else (the head alone) with the head's
    decode = {b: (table if b in table.overheads or heads is None else heads).decode_ms(b) for b in batch_sizes}
    rows = [
        _predict(table, e.config, b, decode[b], *_accept_length(e, b, probes))
        for b in batch_sizes
        for e in grid
    ] + [_predict_model_free(table, m, b, decode[b]) for b in batch_sizes for m in model_free]
    if heads is not None:
        rows += [_predict(heads, c, b, decode[b], *_accept_length(GridEntry(c), b, mtp), method="mtp")
                 for b in batch_sizes for c in dict.fromkeys(p.config for p in mtp)]
    best = {b: max((r for r in rows if r.batch_size == b), key=lambda r: r.tokens_per_second)
            for b in batch_sizes}
    return Plan(
        baseline_tokens_per_second={
            b: model.baseline_tokens_per_second(b, decode[b]) for b in batch_sizes
        },
        decode_ms=decode,
        configs=rows,
        best=best,
        verdict=_verdict(best, decode),
        served_baseline_tokens_per_second={
            b: table.served[b].tokens_per_second(1.0, table.served[b].step_ms) for b in batch_sizes
        } if table.served else None,
        served_request_tokens=next(iter(table.served.values())).request_tokens if table.served else None,
    )


def _predict(
    table: CostTable, config: SpecConfig, b: int, decode_ms: float, accept: float, source: str,
    method: str = "eagle3",
) -> ConfigPlan:
    cycle = table.cycle(b, config, accept)
    tps = model.tokens_per_second(b, accept, cycle.total_ms)
    return ConfigPlan(
        steps=config.steps,
        topk=config.topk,
        num_draft_tokens=config.num_draft_tokens,
        batch_size=b,
        accept_length=accept,
        accept_length_source=source,
        cycle_ms=cycle.total_ms,
        tokens_per_second=tps,
        speedup=tps / model.baseline_tokens_per_second(b, decode_ms),
        break_even_accept_length=model.break_even_accept_length(cycle.total_ms, decode_ms),
        draft_extend_ms=cycle.draft_extend_ms,
        draft_steps_ms=cycle.draft_steps_ms,
        verify_ms=cycle.verify_ms,
        allreduce_ms=cycle.allreduce_ms,
        overhead_ms=cycle.overhead_ms,
        method=method,
        **_served(table, b, accept, cycle.total_ms, decode_ms),
    )


def _served(table: CostTable, b: int, accept: float, cycle_ms: float, decode_ms: float) -> dict[str, float]:
    """The served cycle and tok/s (:mod:`draftlab.cost.served`) when the profile measured draftlab serve."""
    served = table.served.get(b)
    if served is None:
        return {}
    cycle = served.cycle_ms(cycle_ms, decode_ms)
    return {"served_cycle_ms": cycle, "served_tokens_per_second": served.tokens_per_second(accept, cycle)}


def _predict_model_free(table: CostTable, entry: ModelFreeEntry, b: int, decode_ms: float) -> ConfigPlan:
    """A model-free cycle: its proposer's CPU time is not modelled; the verify runs over the bonus
    position plus the mean drafted tokens (vLLM verifies what was proposed, a variable number per
    request), with the assumed per-cycle overhead and the decoder's own work of a plain decode step
    (the least a cycle does; the EAGLE-3 cycle's measured overhead includes drafting)."""
    tokens = 1 + entry.drafted
    verify, allreduce = table.verify.at(b, tokens), table.allreduce_ms(b, tokens)
    own = table.overheads.get(b)
    overhead = table.overhead_ms + (own.decode_ms if own else 0.0)
    cycle = verify + allreduce + overhead
    tps = model.tokens_per_second(b, entry.accept_length, cycle)
    return ConfigPlan(
        steps=entry.k, topk=1, num_draft_tokens=entry.k + 1, batch_size=b, accept_length=entry.accept_length,
        accept_length_source=entry.source, cycle_ms=cycle, tokens_per_second=tps,
        speedup=tps / model.baseline_tokens_per_second(b, decode_ms),
        break_even_accept_length=model.break_even_accept_length(cycle, decode_ms),
        draft_extend_ms=0.0, draft_steps_ms=0.0, verify_ms=verify, allreduce_ms=allreduce,
        overhead_ms=overhead, method=entry.method, **_served(table, b, entry.accept_length, cycle, decode_ms),
    )


def _accept_length(entry: GridEntry, b: int, probes: list[AcceptLength]) -> tuple[float, str]:
    if entry.accept_length is not None:
        return entry.accept_length, "--grid"
    for wanted in (b, None):
        for p in probes:
            if p.config == entry.config and p.batch_size == wanted:
                return p.accept_length, p.source
    c = entry.config.label
    raise DraftlabError(
        f"config {c} at batch size {b} has no probe result and no accept length; probe it, "
        f"or assume one in --grid as {c}:ACCEPT_LENGTH"
    )


def _check_same_model(costs: ModelInfo, probes: list[AcceptLength]) -> None:
    for p in probes:
        for key in ModelInfo.SHAPE_FIELDS:
            theirs = (p.target or {}).get(key)
            ours = getattr(costs, key)
            if theirs is not None and ours is not None and theirs != ours:
                raise DraftlabError(
                    f"{p.source}: the probe's target has {key} {theirs!r} but the costs were "
                    f"measured on a model with {key} {ours!r}; profile the probe's target"
                )


def _verdict(best: dict[int, ConfigPlan], decode: dict[int, float]) -> str:
    lines = []
    for b, r in best.items():
        sentences = []
        verify_steps = (r.verify_ms + r.allreduce_ms) / decode[b]
        if r.speedup > 1:
            sentences.append(
                f"At batch {b}, {r.label} is best: {r.tokens_per_second:.1f} tok/s, "
                f"{r.speedup:.2f}x plain decoding (accept length {r.accept_length:.2f}, "
                f"break-even {r.break_even_accept_length:.2f})."
            )
        else:
            sentences.append(
                f"Speculation loses at batch {b} on this hardware: verify costs "
                f"{verify_steps:.1f} decode steps; the best config, {r.label}, needs an accept "
                f"length of {r.break_even_accept_length:.2f} to break even and gets "
                f"{r.accept_length:.2f} ({r.speedup:.2f}x)."
            )
        parts = [("verify", r.verify_ms), ("all-reduce", r.allreduce_ms),
                 ("drafting", r.draft_extend_ms + r.draft_steps_ms), ("overhead", r.overhead_ms)]
        shares = ", ".join(f"{name} {ms / r.cycle_ms:.0%}" for name, ms in parts if ms > 0)
        sentences.append(f"Its {r.cycle_ms:.1f} ms cycle: {shares}.")
        lines.append(" ".join(sentences))
    return "\n".join(lines)


def _join(values: list[int]) -> str:
    return ", ".join(map(str, values))
