"""The report's layout, measured rather than looked at: no figure's legend covers a data artist (from
the figures' own bounding boxes), and Chromium never wraps a table cell inside a run of letters or
digits ("se/ve/rit/y"), even in a narrow window."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from chromium import chromium

sys.path.insert(0, str(Path(__file__).parents[1] / "assess"))
from costs import toy_profile  # noqa: E402

from draftlab import figures  # noqa: E402
from draftlab.report.html.report import make_report  # noqa: E402

ORDER = ["inspect", "check", "vocab-compare", "probe", "drift", "plan", "bench", "bench-compare"]

# Injected into a copy of the page (the page itself runs no script): for every table cell, each pair of
# neighbouring letters/digits whose second one starts a new line is a word broken in two.
MEASURE = """<script>
const broken = [];
for (const td of document.querySelectorAll("td, th")) {
  const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
  const chars = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.data.length; i++) chars.push([node, i]);
  }
  let prev = null;
  for (const [node, i] of chars) {
    const range = document.createRange();
    range.setStart(node, i); range.setEnd(node, i + 1);
    const rect = range.getBoundingClientRect();
    const ch = node.data[i];
    if (prev && /[\\p{L}\\p{N}]/u.test(ch) && /[\\p{L}\\p{N}]/u.test(prev.ch) && rect.top > prev.top + 2) {
      broken.push(td.textContent.slice(0, 60));
      break;
    }
    prev = {ch, top: rect.top};
  }
}
document.body.setAttribute("data-broken", JSON.stringify(broken));
document.body.setAttribute("data-cells", String(document.querySelectorAll("td, th").length));
</script>"""


def _sweep_and_log(tmp_path: Path) -> list[Path]:
    log = tmp_path / "train_log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 3.0 / s, "accuracy_by_step": [0.9 - s / 10, 0.4],
                                       "tokens_per_second": 1e3, "eval": {"accept_length": 1.5 + s / 10}}) + "\n"
                           for s in range(1, 6)))
    sweep = tmp_path / "sweep.json"
    rows = [{"batch": b, "steps": s, "topk": 1, "num_draft_tokens": s + 1, "config": c, "output_throughput": tp,
             "speedup": sp, "accept_length": al, "ttft_p50_ms": 10.0, "tpot_p50_ms": 5.0 * b, "completed": 4,
             "failed": 0, "error": None}
            for b, s, c, tp, sp, al in [(1, 0, "baseline", 80.0, 1.0, None), (1, 3, "3/1/4", 120.0, 1.5, 2.9),
                                       (8, 0, "baseline", 400.0, 1.0, None), (8, 3, "3/1/4", 360.0, 0.9, 2.9)]]
    sweep.write_text(json.dumps({"engine": "sglang", "target": "T", "drafter": "D", "api": "openai-chat",
                                 "max_running_requests": 8, "out_dir": str(tmp_path), "rows": rows, "complete": True}))
    return [log, sweep]


def test_no_legend_covers_data_in_any_figure(toy_results, tmp_path, monkeypatch):
    made, covered = [], []
    to_svg = figures.to_svg

    def checked(fig):
        made.append(fig)
        covered.extend(figures.legend_overlaps(fig))
        return to_svg(fig)

    monkeypatch.setattr(figures, "to_svg", checked)
    make_report([toy_results[k] for k in ORDER] + _sweep_and_log(tmp_path), tmp_path / "r.html")
    with_legend = [f for f in made if any(ax.get_legend() for ax in f.axes)]
    assert len(with_legend) >= 5  # plan (two), drift, bench compare, sweep, train
    assert covered == []


def test_the_overlap_check_sees_a_legend_over_bars():
    """The check's own control: a legend placed inside the axes, over the bars, is caught."""
    with figures.axes(1) as (fig, (ax,)):
        ax.bar(["a", "b", "c"], [5, 5, 5], label="tok/s")
        ax.legend(loc="center")
        assert figures.legend_overlaps(fig)


def test_chromium_never_breaks_a_word_inside_a_table_cell(toy_results, tmp_path):
    import subprocess

    from chromium import FLAGS

    binary = chromium()
    page = tmp_path / "r.html"
    make_report([toy_results[k] for k in ORDER] + _sweep_and_log(tmp_path), page)
    html = page.read_text()
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)  # let the measuring script run
    probe = tmp_path / "measured.html"
    probe.write_text(html.replace("</body>", MEASURE + "</body>"))
    for width in (480, 800):
        done = subprocess.run([binary, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},4000",
                               "--dump-dom", probe.resolve().as_uri()], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        cells = re.search(r'data-cells="(\d+)"', done.stdout)
        broken = re.search(r'data-broken="([^"]*)"', done.stdout)
        assert cells and int(cells.group(1)) > 50, "the script did not run"
        assert json.loads(broken.group(1).replace("&quot;", '"')) == [], width


@pytest.mark.parametrize("text, breaks", [("--speculative-num-steps", True), ("severity", False), ("3/1/4", False)])
def test_long_cells_may_wrap_only_after_separators(text, breaks):
    from draftlab.report.html.markup import cell

    out = cell(text)
    assert ("<wbr>" in out) == breaks and out.replace("<wbr>", "") == text
    assert not re.search(r"[A-Za-z0-9]<wbr>[A-Za-z0-9]", out)


def test_no_legend_covers_data_in_the_commands_pngs(tmp_path, monkeypatch):
    """plan --plot, sweep, bench compare and train write their own PNGs; each keeps its legend off the data."""
    from draftlab.bench.compare import CompareRow, plot_rows
    from draftlab.bench.sweep import SweepRow
    from draftlab.bench.sweep_plot import plot_sweep
    from draftlab.cost.model import SpecConfig
    from draftlab.cost.plan import make_plan
    from draftlab.cost.plot import plot_plan
    from draftlab.cost.probes import AcceptLength
    from draftlab.cost.profile import load_profile
    from draftlab.train.plot import plot_training

    made, covered = [], []
    save = figures.save_png

    def checked(fig, dest, dpi):
        made.append(dest)
        covered.extend(figures.legend_overlaps(fig))
        save(fig, dest, dpi)

    monkeypatch.setattr(figures, "save_png", checked)
    log = [json.loads(line) for line in _sweep_and_log(tmp_path)[0].read_text().splitlines()]
    plot_training(log, tmp_path / "train.png")
    sweep = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    plot_sweep([SweepRow(**{k: r[k] for k in SweepRow.__dataclass_fields__ if k in r}) for r in sweep],
               tmp_path / "sweep.png")
    arms = [CompareRow(label=label, file="f.json", concurrency=c, request_rate=None, completed=8, failed=0,
                       output_throughput=100.0 * c * (1 + i), speedup=None, ttft_p50_ms=None, tpot_mean_ms=5.0 + c,
                       itl_p50_ms=None, e2e_p50_ms=None, accept_length=None)
            for i, label in enumerate(["plain", "3/1/4"]) for c in (1, 2, 4, 8)]
    plot_rows(arms, tmp_path / "compare.png")
    accepts = [AcceptLength(SpecConfig(s, 1, s + 1), 1.0 + 0.6 * s, "--grid") for s in (1, 3, 5)]
    plot_plan(make_plan(load_profile(toy_profile(tmp_path / "costs.json")), accepts, batch_sizes=[1, 8]),
              tmp_path / "plan.png")
    assert len(made) == 4 and all(p.stat().st_size > 1000 for p in made)
    assert covered == []
