"""Sections for the cost side: ``plan`` (predicted tok/s per config and batch size from measured
costs, or the estimate from an engine's own numbers) and the ``profile`` it is made of."""

from __future__ import annotations

from typing import Any

from draftlab import figures
from draftlab.report.html.markup import Section, config_label, figure, num, para, table

PARTS = (("draft", ("draft_extend_ms", "draft_steps_ms")), ("verify", ("verify_ms",)),
         ("all-reduce", ("allreduce_ms",)), ("overhead", ("overhead_ms",)))


def plan_section(doc: dict[str, Any]) -> Section:
    rows = doc["configs"]
    batches = sorted(int(b) for b in doc["baseline_tokens_per_second"])
    findings = []
    for b in batches:
        best = doc["best"].get(str(b))
        if best is None or best["speedup"] <= 1:
            findings.append(f"nothing pays off at batch {b}")
        else:
            who = f"the MTP head ({config_label(best)})" if best.get("method") == "mtp" else config_label(best)
            findings.append(f"{who} pays off at batch {b}: {best['speedup']:.2f}x")
    heading = "; ".join(findings)
    off = [c for c in doc.get("measured_checks") or [] if not c["agrees"]]
    if off:  # the prediction was held against a measurement and failed: say that, not the prediction
        c = off[0]
        heading = (f"the plan's prediction disagrees with what was measured: {c['what']} predicted "
                   f"{c['predicted']:.2f}, measured {c['measured']:.2f}")
    section = Section("plan", heading[0].upper() + heading[1:])
    section.body.append(para(doc["verdict"]))
    for c in doc.get("measured_checks") or []:
        gap = c["predicted"] / c["measured"] - 1 if c["measured"] else float("inf")
        section.body.append(para(
            f"Held against {c['what']}: predicted {c['predicted']:.2f}, measured {c['measured']:.2f} with the same "
            f"settings; " + ("they agree." if c["agrees"] else f"they disagree by {abs(gap):.0%}, so the predicted "
                             "verdict above is not to be acted on as it stands.")))
    section.body.append(_throughput_figure(rows, doc["baseline_tokens_per_second"], batches))
    section.body.append(_split_figure(rows))
    section.body.append(table(
        ["config", "batch", "accept length", "break-even", "cycle ms", "tok/s", "speedup", "accept length from"],
        [(config_label(r), r["batch_size"], num(r["accept_length"]), num(r["break_even_accept_length"]),
          num(r["cycle_ms"], ".3f"), num(r["tokens_per_second"], ".1f"), num(r["speedup"], ".2f", "x"),
          r.get("accept_length_source", "")) for r in rows],
        numeric=[False, True, True, True, True, True, True, False]))
    return section


def _throughput_figure(rows: list[dict[str, Any]], baseline: dict[str, float], batches: list[int]) -> str:
    """Predicted tok/s per config (bars, one panel per batch size) against plain decoding."""
    shown = batches[:4]
    with figures.axes(len(shown), width=max(4.8, 3.4 * len(shown)), height=3.0) as (fig, panels):
        for ax, b in zip(panels, shown):
            mine = [r for r in rows if r["batch_size"] == b]
            colors = [figures.GOOD if r["speedup"] > 1 else figures.BAD for r in mine]
            ax.bar([config_label(r) for r in mine], [r["tokens_per_second"] for r in mine], color=colors)
            base = baseline[str(b)]
            ax.axhline(base, color=figures.BASELINE, linestyle="--", label=f"no speculation ({base:.0f})")
            ax.set_title(f"batch {b}")
            ax.set_xlabel("steps/topk/num_draft_tokens")
            ax.set_ylabel("predicted output tok/s")
            ax.tick_params(axis="x", rotation=45)
            figures.legend(ax)
        svg = figures.to_svg(fig)
    more = f" (first {len(shown)} of {len(batches)} batch sizes; the table has all)" if len(batches) > len(shown) else ""
    return figure(svg, "Predicted throughput per config: green pays off, red loses to plain decoding" + more + ".",
                  "plan-throughput")


def _split_figure(rows: list[dict[str, Any]]) -> str:
    """Each config's cycle split into drafting, verify, all-reduce and overhead, with its break-even line."""
    labels = [f"{config_label(r)} @ {r['batch_size']}" for r in rows]
    with figures.axes(2, width=7.6, height=max(2.4, 0.32 * len(rows) + 1.2)) as (fig, (left, right)):
        start = [0.0] * len(rows)
        for name, keys in PARTS:
            part = [sum(r.get(k) or 0.0 for k in keys) for r in rows]
            left.barh(labels, part, left=start, label=name)
            start = [s + p for s, p in zip(start, part)]
        left.invert_yaxis()
        left.set_xlabel("ms per speculative cycle")
        left.set_ylabel("config @ batch")
        figures.legend(left, fontsize=7)
        right.barh(labels, [r["accept_length"] for r in rows], label="accept length")
        right.scatter([r["break_even_accept_length"] for r in rows], labels, color="black", marker="|", s=200,
                      label="break-even", zorder=3)
        right.invert_yaxis()
        right.set_xlabel("tokens per cycle")
        right.tick_params(axis="y", labelleft=False)
        figures.legend(right, fontsize=7)
        svg = figures.to_svg(fig)
    return figure(svg, "Left: where a cycle's time goes. Right: each config's accept length against the accept "
                       "length it needs to break even (the black mark).", "plan-split")


def engine_estimate_section(doc: dict[str, Any]) -> Section:
    speedup = doc["speedup"]
    verdict = "pays off" if speedup is not None and speedup > 1 else "loses"
    section = Section("plan", f"Speculation {verdict} here: {num(speedup, '.2f', 'x')} "
                              f"({num(doc['tokens_per_second'], '.1f')} against "
                              f"{num(doc['baseline_tokens_per_second'], '.1f')} tok/s)")
    section.body.append(para(doc["verdict"]))
    scenarios = doc.get("what_ifs") or []
    names = ["measured"] + [", ".join(f"{k}={v:g}" for k, v in s["assumptions"].items()) for s in scenarios]
    rates = [doc["tokens_per_second"]] + [s["tokens_per_second"] for s in scenarios]
    gains = [speedup] + [s["speedup"] for s in scenarios]
    with figures.axes(1, width=max(4.8, 1.4 * len(names) + 2.4), height=3.0) as (fig, (ax,)):
        ax.bar(["no speculation", *names], [doc["baseline_tokens_per_second"], *rates],
               color=[figures.BASELINE] + [figures.GOOD if g is not None and g > 1 else figures.BAD for g in gains])
        ax.set_ylabel("output tok/s")
        ax.tick_params(axis="x", rotation=20)
        svg = figures.to_svg(fig)
    section.body.append(figure(svg, "The engine's measured run and each what-if, against plain decoding.",
                               "plan-engine"))
    section.body.append(table(
        ["scenario", "accept length", "cycle ms", "decode ms", "tok/s", "break-even"],
        [("measured", num(doc["accept_length"]), num(doc["cycle_ms"], ".2f"), num(doc["decode_ms"], ".2f"),
          num(doc["tokens_per_second"], ".1f"), num(doc["break_even_accept_length"]))]
        + [(n, num(s["accept_length"]), num(s["cycle_ms"], ".2f"), num(s["decode_ms"], ".2f"),
            num(s["tokens_per_second"], ".1f"), num(s["break_even_accept_length"])) for n, s in
           zip(names[1:], scenarios)],
        numeric=[False] + [True] * 5))
    return section


def profile_section(doc: dict[str, Any]) -> Section:
    """``profile``: the measured pass costs the plan is made of."""
    env, model = doc.get("environment", {}), doc.get("model", {})
    where = env.get("gpus") or env.get("device") or env.get("cpu") or "this machine"
    where = ", ".join(map(str, where)) if isinstance(where, list) else where
    first = min(doc["verify"], key=lambda m: (m["batch_size"], m["tokens"]), default=None)
    heading = f"Measured costs on {where}"
    if first:
        heading += f": a verify pass of {first['tokens']} tokens takes {first['median_ms']:.2f} ms at batch {first['batch_size']}"
    section = Section("profile", heading)
    section.body.append(para(f"{model.get('dtype', '')} model, after {doc.get('context_tokens', 0)} cached tokens, "
                             f"{doc.get('repeats', '?')} timed calls per pass ({doc.get('timer', '')})."))
    rows = [(name, m["batch_size"], m["tokens"], num(m["median_ms"], ".3f"), num(m["p10_ms"], ".3f"),
             num(m["p90_ms"], ".3f")) for name, key in (("verify", "verify"), ("draft step", "draft_step"),
                                                        ("draft-extend", "draft_extend")) for m in doc.get(key, [])]
    if doc.get("allreduce"):
        calls = doc["allreduce"]["calls_per_forward"]
        rows += [(f"all-reduce x{calls}", m["batch_size"], m["tokens"], num(m["median_ms"], ".3f"),
                  num(m["p10_ms"], ".3f"), num(m["p90_ms"], ".3f")) for m in doc["allreduce"]["points"]]
    section.body.append(table(["pass", "batch", "tokens", "median ms", "p10 ms", "p90 ms"], rows,
                              numeric=[False] + [True] * 5))
    return section
