"""Figures as inline SVG drawn with matplotlib: text as paths, so the page needs no font; no
date in the metadata and a fixed hash salt, so the same result gives the same page."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "svg.fonttype": "path",
    "svg.hashsalt": "draftlab",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.prop_cycle": matplotlib.cycler(color=["#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c",
                                                "#0891b2", "#65a30d", "#db2777"]),
}
BASELINE = "#6b7280"  # the no-speculation reference line
GOOD, BAD = "#16a34a", "#dc2626"


@contextmanager
def axes(ncols: int = 1, width: float = 6.4, height: float = 3.0) -> Iterator[tuple[Any, list[Any]]]:
    """A figure of ``ncols`` axes side by side, in the report's style."""
    with plt.rc_context(STYLE):
        fig, grid = plt.subplots(1, ncols, figsize=(width, height), squeeze=False)
        try:
            yield fig, list(grid[0])
        finally:
            plt.close(fig)


def legend(ax: Any, **options: Any) -> Any:
    """``ax``'s legend beside its plotting area (to the right), never over the data; tight layout makes
    room for it. :func:`legend_overlaps` checks it."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **options)


def legend_overlaps(fig: Any) -> list[str]:
    """Each legend that covers a drawn data artist (bar, line, marker) of any axes of ``fig``, as
    ``"legend of <title> covers <artist>"``; empty when no legend covers data. Laid out as saved."""
    from matplotlib.transforms import Bbox

    fig.tight_layout()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.axes:
        box = ax.get_legend().get_window_extent(renderer) if ax.get_legend() else None
        if box is None:
            continue
        for other in fig.axes:
            area = other.get_window_extent(renderer)  # data is clipped to its axes
            for artist in [*other.patches, *other.lines, *other.collections]:
                drawn = Bbox.intersection(artist.get_window_extent(renderer), area)
                if drawn is None or not artist.get_visible():
                    continue
                inter = Bbox.intersection(drawn, box)
                if inter is not None and inter.width > 0.5 and inter.height > 0.5:
                    found.append(f"legend of {ax.get_title() or ax.get_ylabel()!r} covers {artist}")
    return found


def save_png(fig: Any, dest: Any, dpi: int) -> None:
    """The figure as a PNG at ``dest``, atomically, cropped to what is drawn (a legend beside the axes
    included), and closed: the commands' own plots (plan, sweep, bench compare, train)."""
    from draftlab.fsutil import atomic_path

    fig.tight_layout()
    with atomic_path(dest) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)


def to_svg(fig: Any) -> str:
    """The figure as an ``<svg>`` element, ready to inline (no XML prolog or doctype)."""
    fig.tight_layout()
    buf = io.StringIO()
    with plt.rc_context(STYLE):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    # scale with the page up to the drawn size (96 px per inch): drop the fixed size in pt, keep the viewBox
    width = f'class="plot" style="max-width: {fig.get_size_inches()[0] * 96:.0f}px"'
    return re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', lambda m: f"<svg{m.group(1)} {width}", text, count=1)
