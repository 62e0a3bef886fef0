"""The section for ``assess``: the decision first, the reasons and the figures they cite, the slices."""

from __future__ import annotations

from typing import Any

from draftlab import figures
from draftlab.report.html.by_context import assess_curves, context_parts
from draftlab.report.html.markup import Section, esc, figure, num, para, table


def assess_section(doc: dict[str, Any]) -> Section:
    verdict = doc["verdict"]
    section = Section("assess", verdict["headline"])
    section.body.append("<ol class=\"reasons\">" + "".join(f"<li><b>{esc(r['rule'])}</b>: {esc(r['text'])}</li>"
                                                         for r in verdict["reasons"]) + "</ol>")
    if verdict.get("serve"):
        section.body.append(table(["batch size", "run"], sorted(verdict["serve"].items(), key=lambda kv: int(kv[0])),
                                  caption="What to serve per batch size"))
    plan = doc.get("schedule_plan")
    if plan:
        section.body.append(table(["batch sizes", "draft length K"], [(f"{lo}-{hi}", k) for lo, hi, k in plan["ranges"]],
                                  numeric=[False, True],
                                  caption=f"Schedule for {plan['engine']} {plan['version']} (DIR/schedule.json)"))
    elif doc.get("schedule_note"):
        section.body.append(para(f"No schedule: {doc['schedule_note']}"))
    candidates = _candidates(doc)
    if candidates:
        section.body.append(table(["candidate", "accept length", "on OLD"],
                                  [(name, num(new), num(old)) for name, new, old in candidates],
                                  numeric=[False, True, True], caption="Accept length per candidate (bonus included)"))
        section.body.append(_accept_figure(candidates))
    section.body += context_parts(assess_curves(doc))  # the probes' accept length by context
    for kind, title in (("category", "per category"), ("context", "per context length (tokens before the cycle)")):
        names = sorted({n for s in doc.get("slices", {}).values() for n in s.get(kind, {})},
                       key=lambda n: (int(n.split("-")[0].rstrip("+")) if kind == "context" else n))
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


def _candidates(doc: dict[str, Any]) -> list[tuple[str, float, float | None]]:
    old = {_label(r["config"]): r["mean_accept_length"] for r in doc.get("old_probes") or []}
    rows = [(_label(r["config"]), r["mean_accept_length"], old.get(_label(r["config"]))) for r in doc.get("probes") or []]
    rows += [(f"{m['method']} k={m['options']['num_speculative_tokens']}", m["mean_accept_length"], None)
             for m in doc.get("model_free") or []]
    return rows


def _label(config: dict[str, Any]) -> str:
    return f"{config['steps']}/{config['topk']}/{config['num_draft_tokens']}"


def _accept_figure(rows: list[tuple[str, float, float | None]]) -> str:
    names = [r[0] for r in rows]
    with figures.axes(1, width=7.2, height=2.8) as (fig, (ax,)):
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r[1] for r in rows], width=0.4, label="this target")
        if any(r[2] is not None for r in rows):
            ax.bar([i + 0.2 for i in x], [r[2] or 0 for r in rows], width=0.4, label="OLD")
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=30, ha="right")
        ax.set_ylabel("accept length")
        figures.legend(ax)
        svg = figures.to_svg(fig)
    return figure(svg, "Accept length per candidate: the drafter's configs here and on OLD, the model-free methods.",
                  "assess-accept")
