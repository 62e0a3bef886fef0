"""The section for ``assess``: the answer about the drafter first, with the reasons and the figures they cite;
the drafter and the target's own MTP head side by side, where the target ships one the release serves; then
the serving part (the method per batch size, why a model-free one wins, the schedule); how far the timings
can be trusted; the accept lengths, each column naming its target; the slices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draftlab import figures
from draftlab.acceptance.by_context import label_start
from draftlab.report.html.by_context import assess_curves, context_parts
from draftlab.report.html.markup import Section, esc, figure, num, para, table


def assess_section(doc: dict[str, Any]) -> Section:
    verdict = doc["verdict"]
    if verdict is None:  # an interrupted run's partial result
        section = Section("assess", f"Partial assess of {_name(doc, 'drafter')} on {_name(doc, 'target')}: "
                                    f"{', '.join(doc.get('missing') or [])} still to run (assess --resume)")
    else:
        section = Section("assess", verdict["headline"])
        section.body.append("<ol class=\"reasons\">" + "".join(f"<li><b>{esc(r['rule'])}</b>: {esc(r['text'])}</li>"
                                                             for r in verdict["reasons"]) + "</ol>")
        section.body += _versus(doc)
        section.body += _serving(doc)
    section.body += _timings(doc)
    candidates = _candidates(doc)
    if candidates:
        here, old = _name(doc, "target"), _name(doc, "old_target")
        section.body.append(table(["candidate", f"accept length on {here}", f"on {old} (OLD)"],
                                  [(name, num(new), num(was)) for name, new, was in candidates],
                                  numeric=[False, True, True], caption="Accept length per candidate (bonus included)"))
        section.body.append(_accept_figure(candidates, here, old))
    section.body += context_parts(assess_curves(doc))  # the probes' accept length by context
    for kind, title in (("category", "per category"),
                        ("context", "per context (the cycle's root position), every candidate")):
        names = sorted({n for s in doc.get("slices", {}).values() for n in s.get(kind, {})},
                       key=label_start if kind == "context" else str)
        if len(names) > 1 or kind == "category" and names:
            rows = [(label, *(num((s.get(kind, {}).get(n) or {}).get("accept_length")) for n in names))
                    for label, s in doc["slices"].items()]
            section.body.append(table(["candidate", *names], rows, numeric=[False, *[True] * len(names)],
                                      caption=f"Accept length {title}"))
    timings = doc.get("timings") or {}
    if timings:
        section.body.append(para("Phases: " + ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in timings.items()
                                                        if k.endswith("_s"))))
    return section


def _versus(doc: dict[str, Any]) -> list[str]:
    """The EAGLE-3 drafter and the target's own MTP head side by side, with the one the verdict names better;
    or why the head is no candidate here."""
    versus, note = doc["verdict"].get("versus"), doc.get("mtp_note")
    if not versus:
        return ["<h3>The drafter or the target's own MTP head</h3>", para(f"No comparison: {note}.")] if note else []
    rows = [("config", "config"), ("accept length (bonus included)", "accept_length"),
            (f"predicted tok/s at batch {versus['batch_size']}", "tokens_per_second"),
            ("against plain decoding", "speedup"), ("cycle, ms", "cycle_ms")]
    sides = (versus["drafter"], versus["mtp"])
    shown = [(name, *(side[key] if key == "config" else num(side[key]) for side in sides))
             for name, key in rows if key in versus["drafter"]]
    better = {"drafter": "the EAGLE-3 drafter", "mtp": "the MTP head"}.get(versus["better"] or "", "not decided")
    return ["<h3>The drafter or the target's own MTP head</h3>", para(versus["text"][0].upper() + versus["text"][1:]
                                                                      + "."),
            table(["", "EAGLE-3 drafter", f"MTP head ({(doc.get('mtp') or {}).get('mtp_layer', 'mtp')})"], shown,
                  numeric=[False, True, True], caption=f"Side by side on the same prompts; better: {better}"),
            *([para(f"Also: {note}.")] if note else [])]


def _serving(doc: dict[str, Any]) -> list[str]:
    """The serving part: the method per batch size (or why speed is not decided) and the engine's schedule."""
    verdict, parts = doc["verdict"], ["<h3>Serving</h3>"]
    serving = verdict.get("serving")
    if serving:
        parts.append(para(serving["text"][0].upper() + serving["text"][1:] + "."))
        if serving.get("model_free_note"):
            parts.append(para(f"Why: {serving['model_free_note']}."))
    if verdict.get("serve"):
        parts.append(table(["batch size", "run"], sorted(verdict["serve"].items(), key=lambda kv: int(kv[0])),
                           caption="What to serve per batch size"))
    plan = doc.get("schedule_plan")
    if plan:
        parts.append(table(["batch sizes", "draft length K"], [(f"{lo}-{hi}", k) for lo, hi, k in plan["ranges"]],
                           numeric=[False, True],
                           caption=f"Schedule for {plan['engine']} {plan['version']}: the drafter's draft length "
                                   "per batch-size range (DIR/schedule.json)"))
    elif doc.get("schedule_note"):
        parts.append(para(f"No schedule: {doc['schedule_note']}"))
    return parts


def _timings(doc: dict[str, Any]) -> list[str]:
    """How far the timings can be trusted: their spread, the contradictions, the plan held against a real decode."""
    from draftlab.cost.crosscheck import check_sentence

    timing = doc.get("timing")
    if not timing:
        return []
    spread = ", ".join(f"{name.replace('_', ' ')} {ratio:.2f}x" for name, ratio in timing["spread"].items())
    lines = [f"Timings: interleaved repeats; the widest spread (p90 / p10) per pass: {spread}."]
    lines += [f"Contradiction: {c}." for c in timing["contradictions"]]
    lines += [check_sentence(c) for c in doc.get("measured_checks") or []]
    if timing["contradictions"] or any(not c["agrees"] for c in doc.get("measured_checks") or []):
        lines.append("The plan made from these timings is in DIR/plan.json; it is not shown here, since it would "
                     "pick a winner that the timings cannot support.")
    return ["<h3>Timings</h3>", *(para(line) for line in lines)]


def _name(doc: dict[str, Any], key: str) -> str:
    """The folder name of a model assess.json's config names (the drafter, the target, OLD)."""
    given = (doc.get("config") or {}).get(key)
    return Path(given).name if given else {"old_target": "OLD", "target": "the target"}.get(key, "the drafter")


def _candidates(doc: dict[str, Any]) -> list[tuple[str, float, float | None]]:
    old = {_label(r["config"]): r["mean_accept_length"] for r in doc.get("old_probes") or []}
    rows = [(_label(r["config"]), r["mean_accept_length"], old.get(_label(r["config"]))) for r in doc.get("probes") or []]
    rows += [(f"mtp {_label(r['config'])}", r["mean_accept_length"], None) for r in doc.get("mtp_probes") or []]
    rows += [(f"{m['method']} k={m['options']['num_speculative_tokens']}", m["mean_accept_length"], None)
             for m in doc.get("model_free") or []]
    return rows


def _label(config: dict[str, Any]) -> str:
    return f"{config['steps']}/{config['topk']}/{config['num_draft_tokens']}"


def _accept_figure(rows: list[tuple[str, float, float | None]], here: str, old: str) -> str:
    names = [r[0] for r in rows]
    with figures.axes(1, width=7.2, height=2.8) as (fig, (ax,)):
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r[1] for r in rows], width=0.4, label=here)
        if any(r[2] is not None for r in rows):
            ax.bar([i + 0.2 for i in x], [r[2] or 0 for r in rows], width=0.4, label=f"{old} (OLD)")
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=30, ha="right")
        ax.set_ylabel("accept length")
        figures.legend(ax)
        svg = figures.to_svg(fig)
    return figure(svg, f"Accept length per candidate: the drafter's configs on {here} and on {old} (OLD), the "
                       "target's own MTP head's where it ships one, the model-free methods.",
                  "assess-accept")
