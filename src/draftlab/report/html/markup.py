"""The pieces of a report page: a section, and escaped HTML for tables, figures and numbers."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Section:
    """One result on the page. ``heading`` states the finding in plain text; ``body`` is HTML."""

    kind: str  # what the result is ("probe", "plan", ...): the recognizer's name for it
    heading: str
    body: list[str] = field(default_factory=list)
    source: str = ""  # the file it came from
    provenance: dict[str, Any] | None = None  # command and versions, when the result carries them

    @property
    def figures(self) -> int:
        """How many figures ``body`` holds."""
        return sum(part.startswith("<figure") for part in self.body)


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


_SEPARATORS = re.compile(r"([/_.,:=-]+)")


def cell(value: Any) -> str:
    """A table cell's text, escaped; a long run without spaces (a path, a flag list) may wrap after its
    separators, never inside a run of letters or digits (the table's CSS breaks nowhere else)."""
    return " ".join(_SEPARATORS.sub(r"\1<wbr>", esc(word)) if len(word) > 16 else esc(word)
                    for word in str(value).split(" "))


def num(value: float | None, spec: str = ".2f", unit: str = "") -> str:
    """``value`` formatted by ``spec`` (and ``unit``), or an en dash when there is none."""
    if value is None:
        return "–"
    return format(value, spec) + unit


def pct(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}%}"


def para(text: str) -> str:
    """A paragraph of plain text."""
    return f"<p>{esc(text)}</p>"


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *, numeric: Sequence[bool] | None = None,
          caption: str | None = None) -> str:
    """An HTML table; cells are escaped; ``numeric`` columns are right-aligned."""
    numeric = numeric or [False] * len(columns)
    align = [' class="n"' if n else "" for n in numeric]
    head = "".join(f"<th{a}>{cell(c)}</th>" for c, a in zip(columns, align))
    body = "".join("<tr>" + "".join(f"<td{a}>{cell(v)}</td>" for v, a in zip(row, align)) + "</tr>" for row in rows)
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f'<div class="table"><table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def key_values(pairs: Iterable[tuple[str, Any]]) -> str:
    """A two-column table of names and values."""
    rows = "".join(f"<tr><th>{cell(k)}</th><td>{cell(v)}</td></tr>" for k, v in pairs)
    return f'<div class="table"><table class="kv"><tbody>{rows}</tbody></table></div>'


def pre(text: str) -> str:
    return f"<pre>{esc(text)}</pre>"


def figure(svg: str, caption: str, name: str) -> str:
    """An inline SVG figure; ``name`` (``data-figure``) lets a test or a reader's stylesheet find it."""
    return f"<figure data-figure=\"{esc(name)}\">{svg}<figcaption>{esc(caption)}</figcaption></figure>"


def config_label(doc: dict[str, Any]) -> str:
    """``steps/topk/num_draft_tokens`` as SGLang's flags name them, e.g. ``3/1/4``; a model-free
    candidate as its method and draft count, e.g. ``ngram k=5``; the target's own MTP head as ``mtp 3/1/4``."""
    if doc.get("method") == "mtp":
        return f"mtp {doc['steps']}/{doc['topk']}/{doc['num_draft_tokens']}"
    if doc.get("method", "eagle3") != "eagle3":
        return f"{doc['method']} k={doc['steps']}"
    return f"{doc['steps']}/{doc['topk']}/{doc['num_draft_tokens']}"
