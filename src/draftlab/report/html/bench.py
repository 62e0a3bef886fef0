"""Sections for serving benchmarks: one ``bench`` run, ``bench compare`` and ``sweep``."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from draftlab import figures
from draftlab.report.html.markup import Section, figure, num, para, table


def bench_section(doc: dict[str, Any]) -> Section:
    cfg = doc["config"]
    load = f"{cfg['request_rate']:g} requests/s" if cfg.get("request_rate") else f"concurrency {cfg.get('concurrency') or 1}"
    name = cfg.get("label") or cfg.get("model") or cfg["api"]
    section = Section("bench", f"{name}: {doc['output_throughput']:.1f} output tok/s at {load} "
                               f"({doc['completed']} ok, {doc['failed']} failed)")
    section.body.append(para(f"{cfg['api']} API at {cfg['base_url']}, {cfg['max_tokens']} tokens per request"
                             + (f"; accept length {doc['accept_length']:.2f} ({cfg.get('spec_metrics')})"
                                if doc.get("accept_length") is not None else "") + "."))
    section.body.append(table(
        ["latency (ms)", "mean", "p50", "p90", "p99"],
        [(name, *(num(doc[key].get(q), ".2f") for q in ("mean", "p50", "p90", "p99")))
         for name, key in (("time to first token", "ttft_ms"), ("time per output token", "tpot_ms"),
                           ("inter-token (per chunk)", "itl_ms"), ("end to end", "e2e_ms"))],
        numeric=[False, True, True, True, True]))
    if doc.get("errors"):
        section.body.append(table(["error", "count", "example"],
                                  [(e["kind"], e["count"], e["example"]) for e in doc["errors"]],
                                  numeric=[False, True, False], caption="Failed requests"))
    return section


def compare_section(doc: dict[str, Any]) -> Section:
    rows, baseline = doc["rows"], doc["baseline"]
    by_rate = any(r.get("request_rate") for r in rows)
    load_key, load_name = ("request_rate", "request rate (requests/s)") if by_rate else ("concurrency", "concurrency")
    others = [r for r in rows if r["label"] != baseline and r.get("speedup") is not None]
    if others:
        lo, hi = min(r["speedup"] for r in others), max(r["speedup"] for r in others)
        span = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}x to {hi:.2f}x"  # one number when they read alike
        labels = sorted({r["label"] for r in others})
        heading = f"{', '.join(labels)} against {baseline}: {span} output throughput"
    else:
        heading = f"{baseline}: no other arm to compare at equal load"
    section = Section("bench-compare", heading)
    section.body.append(para(f"Speedup is output throughput over {baseline}'s at the same {load_name.split(' (')[0]}."))
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        series[r["label"]].append(r)
    loads = sorted({r[load_key] or 1 for r in rows})
    with figures.axes(2, width=7.2, height=2.8) as (fig, (left, right)):
        for label, mine in series.items():
            mine = sorted(mine, key=lambda r: r[load_key] or 0)
            color = figures.BASELINE if label == baseline else None
            if len(loads) == 1:  # one load level: an arm is a bar
                left.bar(label, mine[0]["output_throughput"], color=color)
                right.bar(label, mine[0]["tpot_mean_ms"], color=color)
                continue
            x, dash = [r[load_key] or 1 for r in mine], "--" if label == baseline else "-"
            left.plot(x, [r["output_throughput"] for r in mine], marker="o", label=label, color=color, linestyle=dash)
            right.plot(x, [r["tpot_mean_ms"] for r in mine], marker="o", label=label, color=color, linestyle=dash)
        left.set_ylabel("output tok/s")
        right.set_ylabel("time per output token, mean (ms)")
        for ax in (left, right):
            if len(loads) == 1:
                ax.set_xlabel(f"arm, at {load_name} {loads[0]:g}")
            else:
                ax.set_xlabel(load_name)
                figures.legend(ax, fontsize=7)
        svg = figures.to_svg(fig)
    grows = " as the load grows" if len(loads) > 1 else ""
    section.body.append(figure(svg, f"Throughput (left) and per-token latency (right) of each arm{grows}.",
                               "bench-compare"))
    section.body.append(table(
        ["arm", load_name, "ok", "failed", "output tok/s", "speedup", "TTFT p50 ms", "TPOT mean ms", "accept length"],
        [(r["label"], num(r[load_key], "g"), r["completed"], r["failed"], num(r["output_throughput"], ".1f"),
          num(r["speedup"], ".2f", "x"), num(r["ttft_p50_ms"], ".1f"), num(r["tpot_mean_ms"], ".2f"),
          num(r["accept_length"])) for r in rows],
        numeric=[False] + [True] * 8))
    return section


def sweep_section(doc: dict[str, Any]) -> Section:
    rows = doc["rows"]
    ran = [r for r in rows if r.get("error") is None and r.get("output_throughput") is not None]
    spec = [r for r in ran if r["config"] != "baseline" and r.get("speedup") is not None]
    if spec:
        best = max(spec, key=lambda r: r["speedup"])
        verb = "is best" if best["speedup"] > 1 else "is the least bad, and still loses"
        heading = f"{best['config']} {verb}: {best['speedup']:.2f}x at batch {best['batch']} on {doc['engine']}"
    else:
        heading = f"Sweep on {doc['engine']}: {len(ran)} of {len(rows)} entries ran, no speedup to report"
    section = Section("sweep", heading)
    failed = [r for r in rows if r.get("error")]
    section.body.append(para(
        f"{doc['engine']} serving {doc['target']}" + (f" with {doc['drafter']}" if doc.get("drafter") else "")
        + f", {doc['api']} API, at most {doc['max_running_requests']} running requests per entry; "
        + (f"{len(failed)} entries failed." if failed else "every entry ran.")
        + ("" if doc.get("complete", True) else " The sweep did not finish.")))
    if ran:
        series: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in ran:
            series[r["config"]].append(r)
        with figures.axes(2, width=7.2, height=2.8) as (fig, (left, right)):
            for config, mine in series.items():
                mine = sorted(mine, key=lambda r: r["batch"])
                style = {"color": figures.BASELINE, "linestyle": "--"} if config == "baseline" else {}
                left.plot([r["batch"] for r in mine], [r["output_throughput"] for r in mine], marker="o",
                          label=config, **style)
                right.plot([r["batch"] for r in mine], [r["tpot_p50_ms"] for r in mine], marker="o",
                           label=config, **style)
            left.set_ylabel("output tok/s")
            right.set_ylabel("time per output token, p50 (ms)")
            for ax in (left, right):
                ax.set_xlabel("batch (concurrent requests)")
                ax.set_xscale("log", base=2)
                figures.legend(ax, fontsize=7)
            svg = figures.to_svg(fig)
        section.body.append(figure(svg, "Each speculation config against the baseline as the batch grows.",
                                   "sweep"))
    section.body.append(table(
        ["config", "batch", "output tok/s", "speedup", "accept length", "TTFT p50 ms", "TPOT p50 ms", "error"],
        [(r["config"], r["batch"], num(r.get("output_throughput"), ".1f"), num(r.get("speedup"), ".2f", "x"),
          num(r.get("accept_length")), num(r.get("ttft_p50_ms"), ".1f"), num(r.get("tpot_p50_ms"), ".2f"),
          r.get("error") or "") for r in rows],
        numeric=[False] + [True] * 6 + [False]))
    return section
