"""Sections for ``vocab compare`` and ``vocab coverage``: what a draft vocabulary can propose."""

from __future__ import annotations

from typing import Any

from draftlab.report.html.markup import Section, para, pct, table


def compare_section(doc: dict[str, Any]) -> Section:
    section = Section("vocab-compare", f"The two draft vocabularies share {doc['shared_tokens']:,} of "
                                       f"{doc['a_size']:,} tokens (Jaccard {doc['jaccard']:.2f})")
    differ = doc["differing_d2t_entries"]
    text = f"Sizes {doc['a_size']:,} (A) and {doc['b_size']:,} (B); {differ:,} d2t entries differ" + (
        ", so a drafter's lm_head rows do not carry over from one to the other as they are." if differ else
        ": the same draft ids mean the same target tokens.")
    if doc.get("coverage_a") is not None:
        text += (f" On the counted data, A can propose {pct(doc['coverage_a'])} of the tokens and B "
                 f"{pct(doc['coverage_b'])}.")
    section.body.append(para(text))
    for side in ("a", "b"):
        only = doc.get(f"only_in_{side}") or []
        if only:
            section.body.append(para(f"Only in {side.upper()} ({len(only):,}): "
                                     + ", ".join(map(str, only[:40])) + (" ..." if len(only) > 40 else "")))
    return section


def coverage_section(doc: dict[str, Any]) -> Section:
    section = Section("vocab-coverage", f"The draft vocabulary covers {pct(doc['coverage'])} of the counted tokens")
    section.body.append(para(
        f"{doc['covered_tokens']:,} of {doc['num_tokens']:,} counted tokens lie inside the {doc['draft_size']:,}-token "
        f"draft vocabulary (of {doc['vocab_size']:,}); {doc['distinct_missing']:,} distinct tokens are outside it, "
        "and a drafter can never propose them."))
    if doc["missing"]:
        section.body.append(table(["target id", "count", "text"],
                                  [(m["token_id"], f"{m['count']:,}", repr(m["text"]) if m.get("text") is not None
                                    else "") for m in doc["missing"]],
                                  numeric=[True, True, False], caption="The most frequent tokens outside it"))
    return section
