"""The section for ``train``: loss, teacher-forced accuracy and the exact eval accept length against step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from draftlab import figures
from draftlab.report.html.markup import Section, figure, num, para, pct, table

LOG_FILE = "train_log.jsonl"  # written by draftlab train into OUT, one entry per optimizer step


def read_log(path: Path) -> list[dict[str, Any]] | None:
    """The entries of a train log, or None when ``path`` is not one (the recognizer asks)."""
    entries = []
    try:
        for line in path.read_text().splitlines():
            if line.strip():
                entries.append(json.loads(line))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not entries or not all(isinstance(e, dict) and {"step", "loss", "accuracy_by_step"} <= e.keys()
                              for e in entries):
        return None
    return entries


def train_doc_section(doc: dict[str, Any]) -> Section:
    """``train --json``, with the curves from its OUT/train_log.jsonl when that is still there."""
    log = Path(doc["out"]) / LOG_FILE
    return train_section(doc, read_log(log) if log.is_file() else None)


def train_section(doc: dict[str, Any] | None, log: list[dict[str, Any]] | None) -> Section:
    """A ``train --json`` document and/or its OUT/train_log.jsonl (whichever there is)."""
    evals = [e for e in (doc or {}).get("eval", [])] or [{"step": e["step"], **e["eval"]} for e in log or []
                                                          if "eval" in e]
    steps = doc["steps"] if doc else log[-1]["step"]
    heading = f"Training: {steps} steps"
    if doc:
        heading += f", vocabulary {doc['vocab']}" + (f" from {Path(doc['init']).name}" if doc.get("init") else "")
    if evals:
        first, last = evals[0]["accept_length"], evals[-1]["accept_length"]
        heading += (f"; eval accept length {first:.2f} at step {evals[0]['step']} → {last:.2f} at step "
                    f"{evals[-1]['step']}" if len(evals) > 1 else f"; eval accept length {last:.2f}")
    section = Section("train", heading)
    if doc:
        section.body.append(para(
            f"Written to {doc['out']}: {doc['tokens']:,} tokens at {doc['tokens_per_second']:.0f} tok/s, final loss "
            f"{num(doc['final_loss'], '.4f')}" + (" (interrupted, checkpoint written)" if doc.get("interrupted") else "")
            + ". Accept lengths are the exact probe's on the held-out eval prompts; accuracy is teacher-forced."))
    if log:
        section.body.append(_curves(log, evals))
    accuracy = doc["accuracy_by_step"] if doc else log[-1]["accuracy_by_step"]
    section.body.append(table(["TTT step", "teacher-forced accuracy"],
                              [(i, pct(a)) for i, a in enumerate(accuracy)], numeric=[True, True],
                              caption="Accuracy by TTT step, last steps"))
    if evals:
        section.body.append(table(["step", "accept length"], [(e["step"], num(e["accept_length"])) for e in evals],
                                  numeric=[True, True], caption="Evaluations"))
    return section


def _curves(log: list[dict[str, Any]], evals: list[dict[str, Any]]) -> str:
    steps = [e["step"] for e in log]
    panels = 3 if evals else 2
    with figures.axes(panels, width=3.0 * panels + 0.6, height=2.8) as (fig, axes):
        axes[0].plot(steps, [e["loss"] for e in log])
        axes[0].set_ylabel("TTT loss")
        for k in range(len(log[0]["accuracy_by_step"])):
            axes[1].plot(steps, [e["accuracy_by_step"][k] for e in log], label=f"step {k}")
        axes[1].set_ylabel("teacher-forced accuracy (fraction)")
        figures.legend(axes[1], fontsize=6, ncol=2)
        if evals:
            axes[2].plot([e["step"] for e in evals], [e["accept_length"] for e in evals], marker="o",
                         color=figures.GOOD)
            axes[2].set_ylabel("eval accept length (tokens per cycle)")
        for ax in axes:
            ax.set_xlabel("optimizer step")
        svg = figures.to_svg(fig)
    return figure(svg, "The training run: loss, accuracy per TTT step and the exact eval accept length.",
                  "train-curves")
