"""The decision: from the figures ``assess`` measured to what to do with the drafter, by documented rules.

The verdict has two parts. The headline answers the question asked, about the drafter: serve it as
is, fix its config, fine-tune it, train a new one, or turn it off. The serving part follows: which
method to run at each batch size (the drafter as it is now, the target's own MTP head, or a model-free
method where one is predicted faster, with why it wins on this data) and the engine's schedule. Where
the target ships an MTP head the release serves, one comparison names the better of the two drafting
models (:class:`Versus`: both accept lengths and predicted speeds). All read the same plan, so they
cannot contradict each other. Timings are checked first (:mod:`draftlab.cost.consistency`):
where they contradict each other no speed figure is used, the verdict says so and names them. The one
exception is that comparison: it reads only its own batch size's figures, so contradictions that name other
batch sizes leave it decided (and say where it is not compared).

The headline's rules run in this order and the first that holds is the verdict; every rule that was
checked adds a reason citing the figure behind it (README "assess: the rules"):

1. **fix-config**: the drafter has an error ``check --fix`` cannot fix: nothing else can run.
2. **fine-tune** / **train-from-scratch**: with OLD given, the drafter has lost at least
   :data:`REFIT_LOSS` of its gain over plain decoding (accept length - 1) against OLD, on the config
   that would serve (the drafter's fastest at the smallest batch size, named), and on OLD it would pay
   off (not checked when the timings contradict each other: the loss alone decides then).
   Fine-tuning keeps the drafter's vocabulary and weights; it is the advice unless the draft
   vocabulary covers less than :data:`COVERAGE_MIN` of the new target's text (a new vocabulary means a
   new drafter) or the hidden states the drafter reads moved so far (cosine below
   :data:`COSINE_FLOOR` at an aux layer) that its fc layer no longer sees the features it learned.
3. **speed-undecided**: the timings contradict each other: no speed verdict.
4. **system-bound**: the drafter accepts (over :data:`NEVER_ACCEPTS`), yet no config pays off at any
   batch size even at its best accept length (on OLD when given): the verify cycle costs more than
   the accepted tokens buy; the reasons give the break-even and where the cycle's time goes. Not where
   the target's own MTP head pays off: a drafting model that accepts more does win the cycle back.
5. **speculation-off**: no config pays off at any batch size (the drafter barely accepts, or accepts
   too little where the MTP head pays off).
6. **serve**: the drafter pays off as it is (with its fixed config, when ``check --fix`` fixed one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from draftlab.cost.engine_numbers import EngineEstimate
from draftlab.cost.plan import ConfigPlan, Plan
from draftlab.probe.drift_metrics import LayerDrift

REFIT_LOSS = 0.20  # share of the gain over plain decoding (accept length - 1) lost against OLD that calls for a refit
COVERAGE_MIN = 0.90  # share of the new target's continuation tokens the draft vocabulary must cover to fine-tune
COSINE_FLOOR = 0.50  # aux-layer cosine (old vs new hidden states) under which a fine-tune starts too far away
NEVER_ACCEPTS = 1.10  # an accept length at or under this: the drafter barely ever accepts a draft
LOOPING = 0.50  # share of continuation tokens that repeat earlier text above which the data loops (a toy's greedy text)

KINDS = ("fix-config", "fine-tune", "train-from-scratch", "speed-undecided", "system-bound", "speculation-off",
         "serve")


@dataclass(frozen=True)
class Reason:
    rule: str  # a verdict kind, or the evidence it weighs: "config", "drift", "vocabulary", "timing"
    text: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Serving:
    """The serving part, after the headline: the fastest method per batch size as the drafter is now (a
    model-free method where it is predicted faster), or why speed is not decided."""

    decided: bool  # False: the timings contradict each other and nothing below is chosen by speed
    text: str
    per_batch: dict[str, str]  # batch size -> "3/1/4", "ngram k=4" or "off" (empty when not decided)
    model_free_note: str | None = None  # why a model-free method wins on this data, when it does


@dataclass(frozen=True)
class Versus:
    """The EAGLE-3 drafter against the target's own MTP head, each at its fastest config at the smallest batch
    size planned: the better one by predicted speed (None when the timings at that batch size contradict each
    other)."""

    better: str | None  # "drafter" | "mtp"; None: no speed verdict
    batch_size: int
    text: str
    drafter: dict[str, Any]  # config, accept_length, tokens_per_second, speedup
    mtp: dict[str, Any]
    other_batches: list[int] = field(default_factory=list)  # planned batch sizes where the other one is faster


@dataclass(frozen=True)
class Verdict:
    kind: str  # one of KINDS
    headline: str
    reasons: list[Reason]
    serve: dict[str, Any] | None = None  # per batch size: the method to run, or "off" (the serving part's choice)
    serving: Serving | None = None
    versus: Versus | None = None  # the drafter against the target's own MTP head, where both were planned


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
    timing: list[str] = field(default_factory=list)  # contradictions among the timings: no speed verdict
    timing_batches: list[int] | None = None  # the batch sizes those contradictions name (None: any of them)
    repetition: float | None = None  # share of continuation tokens that repeat earlier text (assess.repetition)
    names: tuple[str, str] = ("the new target", "OLD")  # the target's and OLD's names, for the headlines


def decide(e: Evidence) -> Verdict:
    """The headline (the rules in order; see the module docstring), then the serving part."""
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
    assert e.plan is not None
    serving = _serving(e) if not e.timing else Serving(
        False, "not decided: this machine is too noisy to decide speed, so no method is chosen by its timings", {})
    if e.timing:
        reasons.append(_too_noisy(e.timing))
    kind, headline = _headline(e, reasons, serving)
    noisy = set() if not e.timing else None if e.timing_batches is None else set(e.timing_batches)
    return Verdict(kind, headline, reasons, serving.per_batch or None, serving, _versus(e.plan, noisy))


def _headline(e: Evidence, reasons: list[Reason], serving: Serving) -> tuple[str, str]:
    """The answer about the drafter: its kind and headline, adding the reasons behind it."""
    assert e.plan is not None
    drafter_now = _best(e.plan, _drafter)
    ceiling = _best(e.old_plan, _drafter) if e.old_plan is not None else drafter_now
    b0 = min(drafter_now)
    label = drafter_now[b0].label
    al_new = _row(e.plan, label, b0).accept_length
    al_old = _row(e.old_plan, label, b0).accept_length if e.old_plan is not None else None
    loss = (al_old - al_new) / (al_old - 1) if al_old is not None and al_old > 1 else 0.0
    which = f"the config that would serve at batch {b0}" + ("" if serving.decided else
                                                              ", by timings that contradict each other")
    if al_old is not None:
        reasons.append(Reason(
            "drift", f"{label} ({which}) accepts {al_new:.2f} tokens per cycle on {e.names[0]} and {al_old:.2f} on "
            f"{e.names[1]}, the target it was trained for: {loss:.0%} of its gain over plain decoding lost (refit from "
            f"{REFIT_LOSS:.0%})",
            {"config": label, "accept_length": al_new, "accept_length_old": al_old, "gain_lost": loss,
             "threshold": REFIT_LOSS}))
    ceiling_pays = [b for b, r in ceiling.items() if r.speedup > 1]
    if loss >= REFIT_LOSS and (ceiling_pays or not serving.decided):
        return _refit(e, label, al_new, al_old or al_new, reasons)
    if not serving.decided:
        return "speed-undecided", (f"No speed verdict: this machine's timings contradict each other; {label} "
                                   f"accepts {al_new:.2f} tokens per cycle")
    head_pays = any(r.speedup > 1 for r in _best(e.plan, _head).values())
    if _accepts(ceiling) and not ceiling_pays and not head_pays:
        _system_bound(e, ceiling, reasons)
        return "system-bound", "System-bound: the verify step costs more than a better drafter could win back"
    pays_now = {b: r for b, r in drafter_now.items() if r.speedup > 1}
    if not pays_now:
        reasons.append(Reason("speculation-off", f"the drafter accepts {al_new:.2f} tokens per cycle ({label}); no "
                              f"config beats plain decoding at batch {_join(sorted(drafter_now))} (best "
                              f"{max(r.speedup for r in drafter_now.values()):.2f}x)",
                              {"accept_length": al_new, "speedup": {b: r.speedup for b, r in drafter_now.items()}}))
        free_pays = any(v != "off" for v in serving.per_batch.values())
        return "speculation-off", ("Do not serve this drafter: it does not pay off here" if free_pays
                                   else "Turn speculation off: this drafter does not pay off here")
    off = sorted(set(drafter_now) - set(pays_now))
    reasons.append(Reason("serve", "; ".join(f"batch {b}: {r.label} at {r.speedup:.2f}x (accept length "
                                             f"{r.accept_length:.2f}, break-even {r.break_even_accept_length:.2f})"
                                             for b, r in pays_now.items())
                          + (f"; speculation off at batch {_join(off)}" if off else ""),
                          {"speedup": {b: r.speedup for b, r in drafter_now.items()}}))
    how = f"Fix the config (the fixed copy is {e.fixed_dir}), then serve it" if e.fixed else "Serve as is"
    return "serve", (f"{how}: it pays off at batch {_join(sorted(pays_now))} ({label} at batch {b0})"
                     + (f", not at batch {_join(off)}" if off else ""))


def _serving(e: Evidence) -> Serving:
    """The fastest method per batch size as things are now: the drafter's best config, the MTP head's or a
    model-free method, "off" where none beats plain decoding; why a model-free method wins, when one does."""
    assert e.plan is not None
    drafter_now, free = _best(e.plan, _drafter), _best(e.plan, lambda r: not _drafter(r))
    per_batch, parts, wins = {}, [], []
    for b, mine in drafter_now.items():
        theirs = free.get(b)
        best = theirs if theirs is not None and theirs.tokens_per_second > mine.tokens_per_second else mine
        if best.speedup <= 1:
            per_batch[str(b)] = "off"
            parts.append(f"batch {b}: off (the best, {best.label}, {best.speedup:.2f}x)")
            continue
        per_batch[str(b)] = best.label
        parts.append(f"batch {b}: {best.label} ({best.speedup:.2f}x"
                     + (f"; the drafter's {mine.label} {mine.speedup:.2f}x)" if best is not mine else ")"))
        if best is not mine and best.method != "mtp":
            wins.append(best)
    note = _why_model_free(wins, e.repetition) if wins else None
    text = "Fastest per batch size with the drafter as it is now: " + "; ".join(parts)
    return Serving(True, text, per_batch, note)


def _versus(plan: Plan, noisy: set[int] | None) -> Versus | None:
    """The drafter against the target's own MTP head at the smallest batch size both were planned at, each at
    its fastest config there. ``noisy``: the batch sizes whose timings contradict each other (None: all), where
    speed is not compared (at the smallest one: no speed verdict, the accept lengths only)."""
    drafter, head = _best(plan, _drafter), _best(plan, _head)
    common = sorted(set(drafter) & set(head))
    if not common:
        return None
    quiet = [x for x in common if noisy is not None and x not in noisy]
    b = common[0]
    d, m = drafter[b], head[b]
    both = (f"the EAGLE-3 drafter's {d.label} accepts {d.accept_length:.2f} tokens per cycle, the target's own MTP "
            f"head ({m.label}) {m.accept_length:.2f}")
    if b not in quiet:
        return Versus(None, b, f"{both}; no speed verdict: this machine's timings contradict each other",
                      _figures(d, speed=False), _figures(m, speed=False))
    better = "mtp" if m.tokens_per_second > d.tokens_per_second else "drafter"
    other = [x for x in quiet[1:] if (head[x].tokens_per_second > drafter[x].tokens_per_second) != (better == "mtp")]
    unsure = [x for x in common if x not in quiet]
    name = "The target's own MTP head" if better == "mtp" else "The EAGLE-3 drafter"
    text = (f"{name} is the better candidate at batch {b}: {both}; predicted {d.tokens_per_second:.1f} tok/s "
            f"({d.speedup:.2f}x plain decoding) against {m.tokens_per_second:.1f} ({m.speedup:.2f}x)"
            + (f"; the other one is faster at batch {_join(other)}" if other else "")
            + (f"; not compared at batch {_join(unsure)}, where this machine's timings contradict each other"
               if unsure else ""))
    return Versus(better, b, text, _figures(d), _figures(m), other)


def _figures(row: ConfigPlan, *, speed: bool = True) -> dict[str, Any]:
    """A candidate's figures in :class:`Versus` (its predicted speed only where the timings decide)."""
    figures: dict[str, Any] = {"config": row.label, "accept_length": row.accept_length}
    if speed:
        figures.update(tokens_per_second=row.tokens_per_second, speedup=row.speedup, cycle_ms=row.cycle_ms)
    return figures


def _why_model_free(wins: list[ConfigPlan], repetition: float | None) -> str:
    """Why a model-free method wins here: the text it drafts from repeats (a looping toy), or it simply
    accepts more on this data."""
    m = max(wins, key=lambda r: r.accept_length)
    said = f"{m.label} accepts {m.accept_length:.2f} tokens per cycle on these continuations"
    if repetition is None:
        return said
    said += f"; {repetition:.0%} of their tokens repeat text that came before them (what it copies)"
    if repetition >= LOOPING:
        said += (": the target's greedy continuations loop, which real chat traffic rarely does, so this win "
                 "belongs to this data; measure it on prompts like your traffic before serving it")
    return said


def _too_noisy(contradictions: list[str]) -> Reason:
    """No speed verdict: the timings contradict each other; the first few named, all in the figures."""
    shown = "; ".join(contradictions[:3]) + (f"; and {len(contradictions) - 3} more" if len(contradictions) > 3 else "")
    return Reason("timing", f"this machine is too noisy to decide speed: its timings contradict each other ({shown}); "
                  "rerun on a quiet machine, or give --costs measured on one", {"contradictions": contradictions})


def _system_bound(e: Evidence, ceiling: dict[int, ConfigPlan], reasons: list[Reason]) -> None:
    r = ceiling[min(ceiling)]
    verify = (r.verify_ms + r.allreduce_ms) / r.cycle_ms
    reasons.append(Reason(
        "system-bound", f"even at {'its accept length on OLD' if e.old_plan is not None else 'its accept length'}, "
        f"{r.accept_length:.2f}, {r.label} needs {r.break_even_accept_length:.2f} to break even at batch "
        f"{r.batch_size}: verify is {verify:.0%} of its {r.cycle_ms:.2f} ms cycle, all-reduce "
        f"{r.allreduce_ms / r.cycle_ms:.0%}; no config pays off at batch {_join(sorted(ceiling))}",
        {"config": r.label, "accept_length": r.accept_length, "break_even_accept_length": r.break_even_accept_length,
         "verify_share": verify, "allreduce_share": r.allreduce_ms / r.cycle_ms, "cycle_ms": r.cycle_ms}))


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
        return Verdict(*_refit(e, label, al_new, al_old, reasons), reasons)
    if al_new > be:
        reasons.append(Reason("serve", f"{label} accepts {al_new:.2f} against a break-even of {be:.2f}: predicted "
                              f"{al_new / be:.2f}x plain decoding at batch {est.batch_size}",
                              {"accept_length": al_new, "break_even_accept_length": be}))
        return Verdict("serve", f"Serve as is: {label} at batch {est.batch_size}", reasons,
                       {str(est.batch_size): label})
    reasons.append(Reason("speculation-off", f"{label} accepts {al_new:.2f}, under the break-even {be:.2f}",
                          {"accept_length": al_new, "break_even_accept_length": be}))
    return Verdict("speculation-off", "Turn speculation off: this drafter does not pay off here", reasons)


def _refit(e: Evidence, label: str | None, al_new: float, al_old: float, reasons: list[Reason]) -> tuple[str, str]:
    """Fine-tune, or train anew when the vocabulary or the hidden states moved too far: kind and headline."""
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
        return "train-from-scratch", (f"Train a new drafter: its vocabulary covers only {e.coverage:.1%} of the "
                                      "new target's text")
    if moved is not None and moved.cosine < COSINE_FLOOR:
        return "train-from-scratch", (f"Train a new drafter: the hidden states it reads moved too far (cosine "
                                      f"{moved.cosine:.2f} at layer {moved.layer})")
    new, old = e.names
    return "fine-tune", (f"Fine-tune the drafter on {new}: {label} accepts {al_new:.2f} tokens per cycle there against "
                         f"{al_old:.2f} on {old}, the target it was trained for")


def _best(plan: Plan | None, keep: Callable[[ConfigPlan], bool]) -> dict[int, ConfigPlan]:
    """The fastest row per batch size among the rows ``keep`` keeps (the drafter's configs, say)."""
    out: dict[int, ConfigPlan] = {}
    for r in (plan.configs if plan is not None else []):
        if keep(r) and (r.batch_size not in out or r.tokens_per_second > out[r.batch_size].tokens_per_second):
            out[r.batch_size] = r
    return dict(sorted(out.items()))


def _drafter(row: ConfigPlan) -> bool:
    return row.method == "eagle3"


def _head(row: ConfigPlan) -> bool:
    """A row of the target's own MTP head."""
    return row.method == "mtp"


def _row(plan: Plan, label: str, batch_size: int) -> ConfigPlan:
    return next(r for r in plan.configs if r.method == "eagle3" and r.label == label and r.batch_size == batch_size)


def _accepts(best: dict[int, ConfigPlan]) -> bool:
    return max(r.accept_length for r in best.values()) > NEVER_ACCEPTS


def _join(values: list[int]) -> str:
    return ", ".join(map(str, values))
