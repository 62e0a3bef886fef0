"""The report page: one self-contained HTML file (inline CSS and SVG; a Content-Security-Policy
that lets the browser fetch nothing), readable on a laptop and printable."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from draftlab import __version__
from draftlab.errors import DraftlabError
from draftlab.fsutil import refuse_overlap, write_text_atomic
from draftlab.report.html.markup import Section, esc

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
CSS = """
:root { color-scheme: light; --ink: #111827; --muted: #6b7280; --line: #e5e7eb; --accent: #2563eb; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       max-width: 1040px; margin: 2rem auto; padding: 0 1.25rem; }
h1 { font-size: 1.6rem; margin: 0 0 .25rem; }
h2 { font-size: 1.2rem; margin: 0 0 .25rem; }
.meta { color: var(--muted); font-size: .82rem; margin: 0 0 .75rem; }
.meta code { font-size: .8rem; background: #f3f4f6; padding: 0 .25rem; border-radius: 3px; word-break: break-all; }
nav ol { padding-left: 1.4rem; }
nav a { color: var(--accent); text-decoration: none; }
.kind { color: var(--muted); font-size: .78rem; text-transform: uppercase; letter-spacing: .04em; margin-left: .4rem; }
section.result { border-top: 1px solid var(--line); padding: 1.25rem 0 .5rem; }
figure { margin: .75rem 0; }
figcaption { color: var(--muted); font-size: .82rem; }
svg.plot { width: 100%; height: auto; max-height: 460px; }
table { border-collapse: collapse; margin: .75rem 0; font-size: .85rem; max-width: 100%; }
caption { text-align: left; color: var(--muted); font-size: .82rem; padding-bottom: .25rem; }
.table { overflow-x: auto; max-width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: .25rem .6rem; text-align: left; vertical-align: top;
         overflow-wrap: normal; word-break: normal; hyphens: none; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
table.kv th { font-weight: 600; }
pre { background: #f9fafb; border: 1px solid var(--line); padding: .6rem; overflow-x: auto; font-size: .8rem; }
footer { color: var(--muted); font-size: .8rem; border-top: 1px solid var(--line); margin-top: 2rem; padding-top: .5rem; }
@media print {
  body { margin: 0; max-width: none; font-size: 11pt; }
  section.result, figure, table { break-inside: avoid; }
  nav a { color: inherit; }
}
"""


def _provenance(section: Section) -> str:
    p: dict[str, Any] = section.provenance or {}
    parts = [esc(section.kind), f"from {esc(Path(section.source).name)}"]
    if p.get("command"):
        parts.append(f"<code>{esc(p['command'])}</code>")
    versions = ", ".join(f"{name} {p[name]}" for name in ("draftlab", "torch", "transformers", "python") if p.get(name))
    if versions:
        parts.append(esc(versions))
    if p.get("created"):
        parts.append(esc(p["created"]))
    if not p:
        parts.append("no command or versions recorded in this file")
    return " · ".join(parts)


def render_page(sections: list[Section], title: str) -> str:
    """The whole page: a list of the findings, then one section per result."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    toc = "".join(f'<li><a href="#r{i}">{esc(s.heading)}</a><span class="kind">{esc(s.kind)}</span></li>'
                  for i, s in enumerate(sections, 1))
    body = "".join(f'<section class="result" id="r{i}" data-kind="{esc(s.kind)}"><h2>{esc(s.heading)}</h2>'
                   f'<p class="meta">{_provenance(s)}</p>{"".join(s.body)}</section>'
                   for i, s in enumerate(sections, 1))
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            f'<header><h1>{esc(title)}</h1><p class="meta">{len(sections)} result{"s" * (len(sections) != 1)}, '
            f"made by draftlab {esc(__version__)} on {now}</p></header>"
            f"<nav><h2>Findings</h2><ol>{toc}</ol></nav><main>{body}</main>"
            f"<footer>Self-contained: every figure is inline SVG; the page loads nothing from anywhere. "
            f"Accept lengths count the bonus token; flags are SGLang's steps/topk/num_draft_tokens.</footer>"
            f"</body></html>\n")


def write_report(sections: list[Section], out: Path, title: str, inputs: list[Path]) -> Path:
    """Write the page to ``out`` atomically; never over one of its ``inputs``."""
    refuse_overlap(out, {"a result file": inputs})
    if out.is_dir():
        raise DraftlabError("is a folder; give a file name for the page (-o report.html)", path=out)
    write_text_atomic(out, render_page(sections, title))
    return out
