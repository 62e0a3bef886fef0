"""The decision: from the figures ``assess`` measured to what to do next, by documented rules.

The rules run in this order and the first that holds is the verdict; every rule that was checked
adds a reason citing the figure behind it (README "assess: the rules"):

1. **fix-config**: the drafter has an error ``check --fix`` cannot fix: nothing else can run.
2. **model-free**: n-gram or suffix decoding is predicted at least as fast as the drafter at most of
   the batch sizes where speculation pays (against what a refit drafter would at best reach, its
   accept length on OLD, when the drafter has fallen behind there).
3. **fine-tune** / **train-from-scratch**: with OLD given, the drafter has lost at least
   :data:`REFIT_LOSS` of its gain over plain decoding (accept length - 1) against OLD, on the config
   that serves best at the smallest batch size on OLD, and on OLD it would pay off. Fine-tuning keeps the drafter's vocabulary and weights; it is the advice unless the draft
   vocabulary covers less than :data:`COVERAGE_MIN` of the new target's text (a new vocabulary means a
   new drafter) or the hidden states the drafter reads moved so far (cosine below
   :data:`COSINE_FLOOR` at an aux layer) that its fc layer no longer sees the features it learned.
4. **system-bound**: the drafter accepts (over :data:`NEVER_ACCEPTS`), yet no config pays off at any
   batch size even at its best accept length (on OLD when given): the verify cycle costs more than
   the accepted tokens buy; the reasons give the break-even and where the cycle's time goes.
5. **speculation-off**: no config pays off at any batch size (the drafter barely accepts).
6. **serve**: the best config per batch size, and the batch sizes where speculation should be off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from draftlab.cost.engine_numbers import EngineEstimate
from draftlab.cost.plan import ConfigPlan, Plan
from draftlab.probe.drift_metrics import LayerDrift

REFIT_LOSS = 0.20  # share of the gain over plain decoding (accept length - 1) lost against OLD that calls for a refit
COVERAGE_MIN = 0.90  # share of the new target's continuation tokens the draft vocabulary must cover to fine-tune
COSINE_FLOOR = 0.50  # aux-layer cosine (old vs new hidden states) under which a fine-tune starts too far away
NEVER_ACCEPTS = 1.10  # an accept length at or under this: the drafter barely ever accepts a draft

KINDS = ("fix-config", "model-free", "fine-tune", "train-from-scratch", "system-bound", "speculation-off", "serve")


@dataclass(frozen=True)
class Reason:
    rule: str  # a verdict kind, or the evidence it weighs: "config", "drift", "vocabulary"
    text: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    kind: str  # one of KINDS
    headline: str
    reasons: list[Reason]
    serve: dict[str, Any] | None = None  # per batch size: the config to run, or "off"


@dataclass(frozen=True)
class Evidence:
    """What the rules read. ``plan`` holds the drafter's configs and the model-free candidates;
    ``old_plan`` the drafter's configs at their accept lengths on OLD (None without OLD)."""

    fixed: list[str]  # finding codes ``check --fix`` fixed (empty: the config was fine)
    unfixable: list[str]  # errors left after the fix; then nothing else ran
    plan: Plan | None = None
    old_plan: Plan | None = None
    coverage: float | None = None  # draft vocabulary over the new target's continuations
    drift: list[LayerDrift] | None = None  # at the drafter's aux layers
    next_token_agreement: float | None = None
    fixed_dir: str | None = None
    engine: EngineEstimate | None = None  # numbers read off a serving engine, instead of a plan
    engine_config: str | None = None  # the config the engine ran (the one probed)
    accept_length: float | None = None  # the drafter's probe on that config, here and on OLD
    accept_length_old: float | None = None


def decide(e: Evidence) -> Verdict:
    """Apply the rules in order; see the module docstring."""
    reasons: list[Reason] = []
    if e.fixed:
        reasons.append(Reason("config", f"check --fix fixed {', '.join(e.fixed)}; everything after ran on the fixed "
                                        f"copy {e.fixed_dir}", {"fixed": e.fixed, "fixed_dir": e.fixed_dir}))
    if e.unfixable or (e.plan is None and e.engine is None):
        reasons.append(Reason("fix-config", "the drafter cannot run with this target until these are fixed by hand: "
                              + "; ".join(e.unfixable), {"errors": e.unfixable}))
        return Verdict("fix-config", "Fix the drafter's config first", reasons)
    if e.engine is not None:
        return _decide_from_engine(e, reasons)

    drafter_now = _best(e.plan, drafter=True)
    ceiling = _best(e.old_plan, drafter=True) if e.old_plan is not None else drafter_now
    free = _best(e.plan, drafter=False)
    ref = _row(e.plan, ceiling[min(ceiling)].label, min(ceiling))  # what would have served best on OLD
    al_new = ref.accept_length
    al_old = ceiling[min(ceiling)].accept_length if e.old_plan is not None else None
    loss = (al_old - al_new) / (al_old - 1) if al_old is not None and al_old > 1 else 0.0
    fell = loss >= REFIT_LOSS
    ceiling_pays = [b for b, r in ceiling.items() if r.speedup > 1]
    if al_old is not None:
        reasons.append(Reason(
            "drift", f"{ref.label} accepts {al_new:.2f} tokens per cycle on the new target and {al_old:.2f} on "
            f"OLD, the target it was trained for: {loss:.0%} of its gain over plain decoding lost (refit from "
            f"{REFIT_LOSS:.0%})",
            {"config": ref.label, "accept_length": al_new, "accept_length_old": al_old, "gain_lost": loss,
             "threshold": REFIT_LOSS}))

    rival = ceiling if fell else drafter_now
    if free:
        wins = [b for b in free if free[b].speedup > 1 and free[b].tokens_per_second >= rival[b].tokens_per_second]
        pays = [b for b in free if free[b].speedup > 1 or rival[b].speedup > 1]
        m = free[min(free)]
        figures = {"method": m.label, "accept_length": m.accept_length,
                   "tokens_per_second": {b: free[b].tokens_per_second for b in free},
                   "drafter_tokens_per_second": {b: rival[b].tokens_per_second for b in rival},
                   "batch_sizes_won": wins}
        if pays and len(wins) * 2 >= len(pays):
            reasons.append(Reason("model-free", f"{m.label} accepts {m.accept_length:.2f} and is predicted at least as "
                                  f"fast as the drafter{' would be refitted' if fell else ''} at batch "
                                  f"{_join(wins)} ({_speeds(free, rival, wins)})", figures))
            return Verdict("model-free", f"Use {m.label.split()[0]} speculation: a model-free method is as good or "
                           "better on this data", reasons, _schedule(free))
        reasons.append(Reason("model-free", f"the best model-free method, {m.label}, accepts {m.accept_length:.2f}; "
                              f"it wins at {len(wins)} of the {len(pays)} batch sizes where speculation pays", figures))

    if fell and ceiling_pays:
        return _refit(e, al_new, al_old, reasons)
    if _accepts(ceiling) and not ceiling_pays:
        r = ceiling[min(ceiling)]
        verify = (r.verify_ms + r.allreduce_ms) / r.cycle_ms
        reasons.append(Reason(
            "system-bound", f"even at {'its accept length on OLD' if e.old_plan is not None else 'its accept length'}, "
            f"{r.accept_length:.2f}, {r.label} needs {r.break_even_accept_length:.2f} to break even at batch "
            f"{r.batch_size}: verify is {verify:.0%} of its {r.cycle_ms:.2f} ms cycle, all-reduce "
            f"{r.allreduce_ms / r.cycle_ms:.0%}; no config pays off at batch {_join(sorted(ceiling))}",
            {"config": r.label, "accept_length": r.accept_length, "break_even_accept_length": r.break_even_accept_length,
             "verify_share": verify, "allreduce_share": r.allreduce_ms / r.cycle_ms, "cycle_ms": r.cycle_ms}))
        return Verdict("system-bound", "System-bound: the verify step costs more than a better drafter could win back",
                       reasons)
    pays_now = {b: r for b, r in drafter_now.items() if r.speedup > 1}
    if not pays_now:
        reasons.append(Reason("speculation-off", f"the drafter accepts {al_new:.2f} tokens per cycle ({ref.label}); no "
                              f"config beats plain decoding at batch {_join(sorted(drafter_now))} (best "
                              f"{max(r.speedup for r in drafter_now.values()):.2f}x)",
                              {"accept_length": al_new, "speedup": {b: r.speedup for b, r in drafter_now.items()}}))
        return Verdict("speculation-off", "Turn speculation off: this drafter does not pay off here", reasons)
    off = sorted(set(drafter_now) - set(pays_now))
    reasons.append(Reason("serve", "; ".join(f"batch {b}: {r.label} at {r.speedup:.2f}x (accept length "
                                             f"{r.accept_length:.2f}, break-even {r.break_even_accept_length:.2f})"
                                             for b, r in pays_now.items())
                          + (f"; speculation off at batch {_join(off)}" if off else ""),
                          {"speedup": {b: r.speedup for b, r in drafter_now.items()}}))
    where = f" (with the fixed config in {e.fixed_dir})" if e.fixed else ""
    return Verdict("serve", f"Serve as is{where}: {ref.label} at batch {_join(sorted(pays_now))}"
                   + (f", off at batch {_join(off)}" if off else ""), reasons, _schedule(drafter_now))


def _decide_from_engine(e: Evidence, reasons: list[Reason]) -> Verdict:
    """The same rules on an engine's measured cycle: one config, its break-even against the probe's
    accept lengths (model-free methods cannot be costed from these numbers and are only reported)."""
    est, label = e.engine, e.engine_config
    assert est is not None and e.accept_length is not None
    al_new, al_old, be = e.accept_length, e.accept_length_old, est.break_even_accept_length
    share = est.allreduce_share
    reasons.append(Reason(
        "engine", f"the engine's numbers: decode step {est.decode_ms:.2f} ms, {label} cycle {est.cycle_ms:.2f} ms"
        + (f" ({share:.0%} all-reduce)" if share is not None else "") + f": break-even accept length {be:.2f}"
        + (f"; it measured {est.accept_length:.2f}, the probe gives {al_new:.2f}" if est.accept_length else ""),
        {"decode_ms": est.decode_ms, "cycle_ms": est.cycle_ms, "break_even_accept_length": be,
         "allreduce_share": share, "accept_length_engine": est.accept_length, "accept_length": al_new}))
    loss = (al_old - al_new) / (al_old - 1) if al_old is not None and al_old > 1 else 0.0
    ceiling = al_old if al_old is not None else al_new
    if al_old is not None:
        reasons.append(Reason("drift", f"{label} accepts {al_new:.2f} tokens per cycle on the new target and "
                              f"{al_old:.2f} on OLD: {loss:.0%} of its gain over plain decoding lost (refit from "
                              f"{REFIT_LOSS:.0%})", {"config": label, "accept_length": al_new,
                                                      "accept_length_old": al_old, "gain_lost": loss,
                                                      "threshold": REFIT_LOSS}))
    if ceiling > NEVER_ACCEPTS and ceiling <= be:
        reasons.append(Reason(
            "system-bound", f"even at {'its accept length on OLD' if al_old is not None else 'its accept length'}, "
            f"{ceiling:.2f}, {label} stays under the break-even {be:.2f}: the cycle costs "
            f"{est.cycle_ms / est.decode_ms:.1f} decode steps" + (f", {share:.0%} of it all-reduce" if share else ""),
            {"accept_length": ceiling, "break_even_accept_length": be, "allreduce_share": share,
             "cycle_ms": est.cycle_ms, "decode_ms": est.decode_ms}))
        return Verdict("system-bound", "System-bound: the verify step costs more than a better drafter could win back",
                       reasons)
    if al_old is not None and loss >= REFIT_LOSS:
        return _refit(e, al_new, al_old, reasons)
    if al_new > be:
        reasons.append(Reason("serve", f"{label} accepts {al_new:.2f} against a break-even of {be:.2f}: predicted "
                              f"{al_new / be:.2f}x plain decoding at batch {est.batch_size}",
                              {"accept_length": al_new, "break_even_accept_length": be}))
        return Verdict("serve", f"Serve as is: {label} at batch {est.batch_size}", reasons,
                       {str(est.batch_size): label})
    reasons.append(Reason("speculation-off", f"{label} accepts {al_new:.2f}, under the break-even {be:.2f}",
                          {"accept_length": al_new, "break_even_accept_length": be}))
    return Verdict("speculation-off", "Turn speculation off: this drafter does not pay off here", reasons)


def _refit(e: Evidence, al_new: float, al_old: float, reasons: list[Reason]) -> Verdict:
    moved = min(e.drift or [], key=lambda d: d.cosine, default=None)
    if moved is not None:
        reasons.append(Reason("drift", f"the hidden states moved most at aux layer {moved.layer}: cosine "
                              f"{moved.cosine:.3f}, relative L2 {moved.relative_l2:.3f}"
                              + (f"; the targets agree on {e.next_token_agreement:.1%} of next tokens"
                                 if e.next_token_agreement is not None else ""),
                              {"layer": moved.layer, "cosine": moved.cosine, "relative_l2": moved.relative_l2,
                               "next_token_agreement": e.next_token_agreement, "threshold": COSINE_FLOOR}))
    if e.coverage is not None:
        reasons.append(Reason("vocabulary", f"the draft vocabulary covers {e.coverage:.1%} of the new target's "
                              f"continuations (fine-tune from {COVERAGE_MIN:.0%})",
                              {"coverage": e.coverage, "threshold": COVERAGE_MIN}))
    if e.coverage is not None and e.coverage < COVERAGE_MIN:
        return Verdict("train-from-scratch", f"Train a new drafter: its vocabulary covers only {e.coverage:.1%} of the "
                       "new target's text", reasons)
    if moved is not None and moved.cosine < COSINE_FLOOR:
        return Verdict("train-from-scratch", f"Train a new drafter: the hidden states it reads moved too far (cosine "
                       f"{moved.cosine:.2f} at layer {moved.layer})", reasons)
    return Verdict("fine-tune", f"Fine-tune the drafter on the new target: accept length {al_new:.2f} here against "
                   f"{al_old:.2f} on OLD", reasons)


def _best(plan: Plan | None, *, drafter: bool) -> dict[int, ConfigPlan]:
    """The fastest row per batch size among the drafter's configs (or the model-free candidates)."""
    out: dict[int, ConfigPlan] = {}
    for r in (plan.configs if plan is not None else []):
        if (r.method == "eagle3") == drafter and (r.batch_size not in out
                                                  or r.tokens_per_second > out[r.batch_size].tokens_per_second):
            out[r.batch_size] = r
    return dict(sorted(out.items()))


def _row(plan: Plan, label: str, batch_size: int) -> ConfigPlan:
    return next(r for r in plan.configs if r.method == "eagle3" and r.label == label and r.batch_size == batch_size)


def _accepts(best: dict[int, ConfigPlan]) -> bool:
    return max(r.accept_length for r in best.values()) > NEVER_ACCEPTS


def _schedule(best: dict[int, ConfigPlan]) -> dict[str, Any]:
    return {str(b): (r.label if r.speedup > 1 else "off") for b, r in best.items()}


def _speeds(free: dict[int, ConfigPlan], rival: dict[int, ConfigPlan], batches: list[int]) -> str:
    return ", ".join(f"{free[b].tokens_per_second:.0f} vs {rival[b].tokens_per_second:.0f} tok/s at {b}"
                     for b in batches)


def _join(values: list[int]) -> str:
    return ", ".join(map(str, values))
