"""The section for ``drift``: how far a new target version's hidden states moved, layer by layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draftlab import figures
from draftlab.report.html.markup import Section, figure, num, para, pct, table


def drift_section(doc: dict[str, Any]) -> Section:
    cfg, layers = doc["config"], doc["layers"]
    a, b = Path(cfg["target_a"]).name, Path(cfg["target_b"]).name
    worst = min(layers, key=lambda layer: layer["cosine"])
    heading = f"{b} moved from {a}: cosine {worst['cosine']:.3f} at layer {worst['layer']}"
    if doc.get("accept_length_a") is not None:
        heading += f"; the drafter's accept length {doc['accept_length_a']:.2f} → {doc['accept_length_b']:.2f}"
    section = Section("drift", heading)
    section.body.append(para(
        f"Hidden states of both versions over the same {cfg.get('num_sequences', '?')} sequences "
        f"({doc['num_positions']} positions): the targets pick the same next token at "
        f"{pct(doc['next_token_agreement'])} of positions (mean KL(A || B) {doc['kl']:.4f} nats)."
        + (f" The drafter, trained on A, accepts {doc['accept_length_a']:.2f} tokens per cycle there and "
           f"{doc['accept_length_b']:.2f} on B." if doc.get("accept_length_a") is not None else "")))
    x = [layer["layer"] for layer in layers]
    with figures.axes(2, width=7.2, height=2.8) as (fig, (left, right)):
        left.plot(x, [layer["cosine"] for layer in layers], marker="o", label="cosine")
        left.plot(x, [layer["cka"] for layer in layers], marker="s", label="linear CKA")
        left.set_xlabel("target layer (0-based)")
        left.set_ylabel("similarity of A and B (1 = same)")
        figures.legend(left)
        right.plot(x, [layer["relative_l2"] for layer in layers], marker="o", color=figures.BAD)
        right.set_xlabel("target layer (0-based)")
        right.set_ylabel("relative L2, ||B - A|| / ||A||")
        for ax in (left, right):
            ax.set_xticks(x)
        svg = figures.to_svg(fig)
    section.body.append(figure(svg, "Per-layer drift of the hidden states the drafter reads (aux layers) "
                                    "and the others measured.", "drift-layers"))
    section.body.append(table(["layer", "cosine", "relative L2", "CKA"],
                              [(layer["layer"], num(layer["cosine"], ".4f"), num(layer["relative_l2"], ".4f"),
                                num(layer["cka"], ".4f")) for layer in layers], numeric=[True] * 4))
    return section
