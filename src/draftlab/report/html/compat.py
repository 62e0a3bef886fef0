"""Sections for ``inspect``, ``check`` and ``check --fix``: will the pair load and run correctly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draftlab.report.html.markup import Section, key_values, para, pre, table

ENGINES = {"sglang": "SGLang", "vllm": "vLLM", "draftlab": "draftlab serve"}


def _findings(findings: list[dict[str, Any]]) -> str:
    return table(["severity", "code", "field", "what is wrong", "fix", "check --fix"],
                 [(f["severity"], f["code"], f["field"], f["message"], f["fix"], "yes" if f.get("fixable") else "")
                  for f in findings])


def _verdict(doc: dict[str, Any]) -> str:
    errors = sum(f["severity"] == "error" for f in doc["findings"])
    warnings = sum(f["severity"] == "warning" for f in doc["findings"])
    fixable = sum(bool(f.get("fixable")) for f in doc["findings"])
    engine = " ".join(filter(None, (ENGINES.get(doc["engine"], doc["engine"]), doc.get("engine_version"))))
    if not doc["findings"]:
        return f"{Path(doc['drafter']).name} loads cleanly in {engine}"
    worst = f"{errors} error{'s' * (errors != 1)}" if errors else f"{warnings} warning{'s' * (warnings != 1)}"
    return (f"{Path(doc['drafter']).name} in {engine}: {worst}"
            + (f", {fixable} fixable with check --fix" if fixable else ""))


def check_section(doc: dict[str, Any]) -> Section:
    section = Section("check", _verdict(doc))
    section.body.append(para(f"Against target {doc['target']}, {ENGINES.get(doc['engine'], doc['engine'])} will "
                             f"capture target layers {doc['aux_layers']} (from {doc['aux_source']})."))
    if doc["findings"]:
        section.body.append(_findings(doc["findings"]))
    return section


def fix_section(doc: dict[str, Any]) -> Section:
    if doc.get("written") is False:
        section = Section("fix", "check --fix found nothing it can fix, so it wrote no folder")
        section.body.append(para(f"{doc['out']} was not written. {_verdict(doc['before'])}."))
        return section
    after = doc["after"]
    left = sum(f["severity"] == "error" for f in after["findings"])
    section = Section("fix", f"check --fix fixed {len(doc['fixed'])} finding{'s' * (len(doc['fixed']) != 1)}; "
                             + (f"{left} errors remain" if left else "the written drafter checks clean"))
    section.body.append(para(f"Written to {doc['out']}; the input folder is unchanged. "
                             f"After the fix: {_verdict(after)}."))
    if doc["fixed"]:
        section.body.append(_findings(doc["fixed"]))
    if doc.get("renamed"):
        shown = list(doc["renamed"].items())
        section.body.append(table(["tensor", "renamed to"], shown[:12],
                                  caption=f"Tensor renames ({len(shown)})" + (", first 12" if len(shown) > 12 else "")))
    if doc.get("config_diff"):
        section.body.append(pre(doc["config_diff"]))
    if after["findings"]:
        section.body.append(_findings(after["findings"]))
    return section


def inspect_section(doc: dict[str, Any]) -> Section:
    name = Path(doc["path"]).name
    facts = [("path", doc["path"]), ("layout", doc.get("layout")), ("architecture", doc.get("architecture")),
             ("format", doc.get("format")), ("parameters", f"{doc.get('num_parameters', 0):,}"),
             ("dtype", doc.get("dtype")), ("tensors", doc.get("num_tensors"))]
    skip = {"path", "layout", "architecture", "format", "num_parameters", "dtype", "num_tensors", "provenance", "kind"}
    facts += [(k.replace("_", " "), v) for k, v in doc.items() if k not in skip and not isinstance(v, dict)]
    heading = f"{doc['kind'].capitalize()} {name}: {doc.get('layout') or doc.get('architecture')}, {doc.get('num_parameters', 0):,} parameters"
    if doc.get("draft_vocab_size"):
        heading += f", draft vocabulary {doc['draft_vocab_size']:,}"
    section = Section("inspect", heading)
    section.body.append(key_values(facts))
    return section
