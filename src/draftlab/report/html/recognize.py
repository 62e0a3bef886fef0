"""Read result files and tell each result's kind from its contents (no file names, no flags).

A result file is what a draftlab command printed with ``--json`` or wrote with ``-o``: one JSON
object, a JSON list of probe results (``plan --save-probe``), or a ``train_log.jsonl``. Anything
else is one clear error naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from draftlab.errors import DraftlabError
from draftlab.readable import regular_file
from draftlab.report.html import assess, bench, compat, decode, drift, plan, train, vocab
from draftlab.report.html.markup import Section


def _has(*keys: str) -> Callable[[dict[str, Any]], bool]:
    return lambda doc: all(k in doc for k in keys)


def _config_has(*keys: str) -> Callable[[dict[str, Any]], bool]:
    return lambda doc: isinstance(doc.get("config"), dict) and all(k in doc["config"] for k in keys)


# (kind, test on a JSON object, renderer); the first match wins, so the more specific tests come first
KINDS: list[tuple[str, Callable[[dict[str, Any]], bool], Callable[[dict[str, Any]], Section]]] = [
    ("assess", lambda d: str(d.get("format", "")).startswith("draftlab-assess/"), assess.assess_section),
    ("fix", _has("before", "after", "fixed", "out"), compat.fix_section),
    ("check", _has("ok", "engine", "findings", "aux_layers", "drafter", "target"), compat.check_section),
    ("inspect", _has("path", "kind", "layout", "num_tensors"), compat.inspect_section),
    ("vocab compare", _has("jaccard", "shared_tokens", "only_in_a"), vocab.compare_section),
    ("vocab coverage", _has("coverage", "covered_tokens", "missing"), vocab.coverage_section),
    ("drift", lambda d: _has("layers", "next_token_agreement")(d) and _config_has("target_a", "target_b")(d),
     drift.drift_section),
    ("probe", lambda d: _has("acceptance_by_step", "accept_length_histogram", "results")(d)
     and _config_has("responses")(d), decode.probe_section),
    ("generate", lambda d: _has("results", "mean_accept_length")(d) and _config_has("no_draft")(d),
     decode.generate_section),
    ("plan", _has("configs", "best", "baseline_tokens_per_second", "verdict"), plan.plan_section),
    ("plan from engine numbers", _has("cycle_ms", "decode_ms", "break_even_accept_length", "verdict"),
     plan.engine_estimate_section),
    ("profile", lambda d: str(d.get("format", "")).startswith("draftlab-profile/"), plan.profile_section),
    ("sweep", lambda d: _has("rows", "engine", "max_running_requests")(d), bench.sweep_section),
    ("bench compare", lambda d: _has("rows", "baseline")(d), bench.compare_section),
    ("bench", _has("config", "completed", "failed", "output_throughput", "ttft_ms", "tpot_ms"), bench.bench_section),
    ("train", _has("out", "vocab", "steps", "accuracy_by_step", "eval"), train.train_doc_section),
]
NAMES = ", ".join(kind for kind, _, _ in KINDS)


def _sections_of(doc: Any, path: Path) -> list[Section]:
    if isinstance(doc, list) and doc and all(isinstance(d, dict) for d in doc):
        return [s for d in doc for s in _sections_of(d, path)]  # plan --save-probe: a list of probe results
    if isinstance(doc, dict):
        for _kind, test, render in KINDS:
            if test(doc):
                try:
                    section = render(doc)
                except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                    raise DraftlabError(f"looks like a {_kind} result but cannot be read ({type(exc).__name__}: "
                                        f"{exc}); give the file as draftlab wrote it", path=path) from None
                section.source, section.provenance = str(path), doc.get("provenance")
                return [section]
    raise DraftlabError(f"not a draftlab result that report knows ({NAMES}); give the JSON a draftlab command "
                        "printed with --json or wrote with -o", path=path)


def load_sections(paths: list[Path]) -> list[Section]:
    """One section per result in ``paths``, in the order given."""
    sections: list[Section] = []
    for path in paths:
        regular_file(path, "result file not found")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise DraftlabError(f"cannot be read ({exc})", path=path) from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            log = train.read_log(path)
            if log is None:
                raise DraftlabError(f"not valid JSON ({exc.msg} at line {exc.lineno}), nor a train_log.jsonl",
                                    path=path) from None
            section = train.train_section(None, log)
            section.source = str(path)
            sections.append(section)
            continue
        sections.extend(_sections_of(doc, path))
    return sections
