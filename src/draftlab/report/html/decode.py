"""Sections for accept lengths: ``probe`` (exact, or the sampled estimate) and ``generate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draftlab import figures
from draftlab.probe.walk import acceptance_by_step, histogram_list
from draftlab.report.html.by_context import context_parts
from draftlab.report.html.markup import Section, config_label, figure, num, para, pct, table


def probe_section(doc: dict[str, Any]) -> Section:
    cfg = doc["config"]
    label, n = config_label(cfg), cfg.get("num_prompts", len(doc["results"]))
    mean, skipped = doc["mean_accept_length"], doc.get("skipped_prompts") or 0
    how = "estimated at temperature " + f"{cfg['temperature']:g}" if doc.get("estimate") else "exact, greedy"
    pair = f"{Path(cfg['drafter']).name} on {Path(cfg['target']).name}: " if cfg.get("drafter") else ""
    if not doc["results"]:  # an older probe of prompts that were all skipped measured nothing
        heading = f"{pair}{label}: nothing measured, all {n} prompts were as long as the target's context"
    elif skipped:
        heading = (f"{pair}{label} accepts {mean:.2f} tokens per cycle on {n - skipped} of {n} prompts ({how}; "
                   f"{skipped} skipped, as long as the target's context)")
    else:
        heading = f"{pair}{label} accepts {mean:.2f} tokens per cycle on {n} prompts ({how})"
    section = Section("probe", heading)
    facts = [f"Speculation flags {label} ({cfg.get('flags_source', 'given')}), {cfg['responses']} continuations of "
             f"up to {cfg['max_new_tokens']} tokens, on {cfg.get('device', '?')} in {cfg.get('dtype', '?')}."]
    if doc.get("vocab_bound") is not None:
        facts.append(f"{pct(doc['vocab_bound'])} of the continuations' tokens lie inside the draft vocabulary: "
                     "the rest can never be drafted.")
    if doc.get("target_disagreement"):
        facts.append(f"The target's own greedy choice differs from the given response on "
                     f"{pct(doc['target_disagreement'])} of positions.")
    if doc.get("skipped_prompts"):
        facts.append(f"{doc['skipped_prompts']} prompts were skipped (no room for a continuation).")
    section.body += [para(" ".join(facts))]
    _accept_figures(section, doc["accept_length_histogram"], doc["acceptance_by_step"], cfg["steps"])
    section.body += context_parts([(label, doc.get("accept_length_by_context") or [])])
    section.body.append(table(
        ["prompt", "tokens", "cycles", "mean accept", "off-greedy"],
        [(r["prompt_index"], r["continuation_tokens"], r["num_cycles"],
          num(r.get("expected_accept_length") or (sum(r["accept_lengths"]) / r["num_cycles"] if r["num_cycles"] else 0)),
          pct(r.get("target_disagreement"))) for r in doc["results"]],
        numeric=[True] * 5, caption="Per prompt"))
    return section


def generate_section(doc: dict[str, Any]) -> Section:
    cfg = doc["config"]
    rate = doc.get("tokens_per_second")
    if cfg.get("no_draft"):
        section = Section("generate", f"Plain decoding: {num(rate, '.1f')} tok/s on {cfg['num_prompts']} prompts")
        section.body.append(para(f"No drafter; up to {cfg['max_new_tokens']} new tokens per prompt on "
                                 f"{cfg.get('device')} in {cfg.get('dtype')}."))
        return section
    label = config_label(cfg)
    mean = doc["mean_accept_length"]
    how = "".join([f" at temperature {cfg['temperature']:g}" if cfg["temperature"] else "",
                   f", batch {cfg['batch_size']}" if (cfg.get("batch_size") or 1) > 1 else ""])
    section = Section("generate", f"{label} decodes {mean:.2f} tokens per target pass, {num(rate, '.1f')} tok/s{how}")
    section.body.append(para(
        f"Speculative decoding with flags {label} ({cfg.get('flags_source', 'given')}) at temperature "
        f"{cfg['temperature']:g}, up to {cfg['max_new_tokens']} new tokens per prompt, on {cfg.get('device')} in "
        f"{cfg.get('dtype')}."))
    lengths = [a for r in doc["results"] for a in r["accept_lengths"]]
    histogram, by_step = histogram_list(lengths, cfg["steps"]), acceptance_by_step(lengths, cfg["steps"])
    _accept_figures(section, histogram, by_step, cfg["steps"])
    section.body.append(table(
        ["prompt", "new tokens", "cycles", "mean accept"],
        [(r["prompt_index"], len(r["output_ids"]), r["num_cycles"],
          num(sum(r["accept_lengths"]) / r["num_cycles"] if r["num_cycles"] else None)) for r in doc["results"]],
        numeric=[True] * 4, caption="Per prompt"))
    return section


def _accept_figures(section: Section, histogram: list[int], by_step: list[float | None], steps: int) -> None:
    """The accept-length histogram beside the acceptance rate of each draft step."""
    with figures.axes(2, width=7.2, height=2.8) as (fig, (left, right)):
        lengths = list(range(1, len(histogram)))
        left.bar(lengths, histogram[1:])
        left.set_xlabel("accept length (tokens per cycle, bonus included)")
        left.set_ylabel("cycles")
        left.set_xticks(lengths)
        left.set_title("accept lengths")
        shown = [(i + 1, p) for i, p in enumerate(by_step) if p is not None]
        right.bar([s for s, _ in shown], [p for _, p in shown])
        right.set_ylim(0, 1)
        right.set_xlabel("draft step")
        right.set_ylabel("P(accepted | step before accepted)")
        right.set_xticks(range(1, steps + 1))
        right.set_title("acceptance by draft step")
        svg = figures.to_svg(fig)
    section.body.append(figure(svg, "Left: how many tokens each verify cycle committed. Right: the chance that "
                                    "draft token k was accepted once token k-1 was.", "accept-lengths"))
