"""``draftlab report`` as a library call: result files in, one HTML page out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from draftlab.errors import DraftlabError
from draftlab.report.html.page import write_report
from draftlab.report.html.recognize import load_sections


@dataclass
class ReportResult:
    out: Path
    title: str
    sections: list[dict[str, object]] = field(default_factory=list)  # {kind, heading, source, figures}


def make_report(paths: list[Path], out: Path, title: str = "draftlab report") -> ReportResult:
    """Render every result in ``paths`` (in order) into the page ``out``."""
    if not paths:
        raise DraftlabError("give at least one result file (the JSON of a draftlab command)")
    sections = load_sections(paths)
    write_report(sections, out, title, paths)
    return ReportResult(out, title, [{"kind": s.kind, "heading": s.heading, "source": s.source, "figures": s.figures}
                                     for s in sections])
