"""Accept length by context on the page: a table of the buckets (cycles, mean, the limits a bucket
reaches) and a curve per probe, for ``probe``'s section and the probe part of ``assess``'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from draftlab import figures
from draftlab.acceptance.by_context import bucket_label
from draftlab.report.html.markup import config_label, figure, table

CAPTION = ("Mean accept length by the position where each cycle starts (its root token), with the cycles in "
           "each bucket; past: the bucket reaches the drafter's max_position_embeddings or sliding window.")


def context_parts(curves: Sequence[tuple[str, list[dict[str, Any]]]]) -> list[str]:
    """The table and figure for ``curves`` (a label and a probe's ``accept_length_by_context`` each);
    nothing when no probe has buckets (an estimate, or a result written before the field existed)."""
    curves = [(label, buckets) for label, buckets in curves if buckets]
    if not curves:
        return []
    spans = sorted({(b["from"], b["to"]) for _, buckets in curves for b in buckets})
    names = [bucket_label({"from": lo, "to": hi}) for lo, hi in spans]
    rows = []
    for label, buckets in curves:
        at = {(b["from"], b["to"]): b for b in buckets}
        rows.append((label, *(_cell(at.get(span)) for span in spans)))
    first: dict[str, tuple[int, int]] = {}  # each limit: the first bucket that reaches past it
    for _, buckets in curves:
        for b in buckets:
            for name in b.get("past") or []:
                first[name] = min(first.get(name, (b["from"], b["to"])), (b["from"], b["to"]))
    past = [f"past {name} from {bucket_label({'from': lo, 'to': hi})} on" for name, (lo, hi) in first.items()]
    caption = "Accept length (cycles) by cycle position" + (f"; {', '.join(past)}" if past else "")
    return [table(["probe", *names], rows, numeric=[False, *[True] * len(names)], caption=caption),
            _curve_figure(curves, spans, names)]


def _cell(bucket: dict[str, Any] | None) -> str:
    if bucket is None:
        return "–"
    mark = " past" if bucket.get("past") else ""
    return f"{bucket['mean_accept_length']:.2f} ({bucket['cycles']}){mark}"


def _curve_figure(curves: Sequence[tuple[str, list[dict[str, Any]]]], spans: list[tuple[int, int]],
                  names: list[str]) -> str:
    """One line per probe over the buckets; buckets past a limit shaded."""
    x_of = {span: i for i, span in enumerate(spans)}
    with figures.axes(1, width=7.2, height=2.8) as (fig, (ax,)):
        for label, buckets in curves:
            ax.plot([x_of[(b["from"], b["to"])] for b in buckets], [b["mean_accept_length"] for b in buckets],
                    marker="o", label=label)
        for span in {(b["from"], b["to"]) for _, bs in curves for b in bs if b.get("past")}:
            ax.axvspan(x_of[span] - 0.5, x_of[span] + 0.5, color=figures.BAD, alpha=0.08)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names)
        ax.set_xlabel("position where the cycle starts (tokens before it)")
        ax.set_ylabel("mean accept length")
        figures.legend(ax)
        svg = figures.to_svg(fig)
    return figure(svg, CAPTION, "accept-by-context")


def assess_curves(doc: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """assess's probes, each by its flags, then those on the old target (``on OLD``)."""
    return [(config_label(p["config"]) + suffix, p.get("accept_length_by_context") or [])
            for key, suffix in (("probes", ""), ("old_probes", " on OLD")) for p in doc.get(key) or []]
