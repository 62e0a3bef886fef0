"""The page ``assess`` writes for a target that ships an MTP head beside an EAGLE-3 drafter: the two side by
side on the same prompts (config, accept length, predicted tok/s, speed-up), the comparison's sentence, the
head among the candidates' accept lengths and its probe as a section of its own."""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "assess"))
from costs import toy_profile

from draftlab.cli import main
from draftlab.toy.mtp_drafter import cached_mtp_eagle3_drafter


def rows_of(page: str, caption_start: str) -> list[list[str]]:
    """The body rows of the table whose caption starts with ``caption_start``, as cell texts."""
    found = re.search(r"<caption>" + re.escape(caption_start) + r".*?</caption>.*?<tbody>(.*?)</tbody>", page, re.S)
    assert found, caption_start
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", found.group(1))]


def test_the_drafter_and_the_mtp_head_side_by_side(mtp_toy, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("def __init__(self, name",
                                                                           "import os\nimport sys\n\n")))
    out = tmp_path / "assess"
    code = main(["assess", "--drafter", str(cached_mtp_eagle3_drafter(mtp_toy.target_dir)), "--target",
                 str(mtp_toy.target_dir), "--prompts", str(prompts), "--engine", "vllm", "--costs",
                 str(toy_profile(tmp_path / "costs.json", mtp_ms=1.5)), "--grid", "3/1/4", "--batch-sizes", "1,8",
                 "--max-new-tokens", "20", "--model-free", "none", "--out", str(out)])
    assert code in (0, None)
    doc = json.loads((out / "assess.json").read_text())
    versus = doc["verdict"]["versus"]
    page = (out / "report.html").read_text()
    side = {row[0]: row[1:] for row in rows_of(page, "Side by side on the same prompts")}
    d, m = versus["drafter"], versus["mtp"]
    assert side["config"] == ["3/1/4", "mtp 3/1/4"]
    assert side["accept length (bonus included)"] == [f"{d['accept_length']:.2f}", f"{m['accept_length']:.2f}"]
    assert side["predicted tok/s at batch 1"] == [f"{d['tokens_per_second']:.2f}", f"{m['tokens_per_second']:.2f}"]
    assert side["against plain decoding"] == [f"{d['speedup']:.2f}", f"{m['speedup']:.2f}"]
    assert "MTP head (model.layers.4)" in page
    assert html.escape(versus["text"][1:]) in page  # the comparison's sentence, its first letter capitalised
    candidates = {row[0]: row[1] for row in rows_of(page, "Accept length per candidate")}
    assert candidates["mtp 3/1/4"] == f"{doc['mtp_probes'][0]['mean_accept_length']:.2f}"
    assert candidates["3/1/4"] == f"{doc['probes'][0]['mean_accept_length']:.2f}"
    assert "mtp on target: 3/1/4 accepts" in page  # the head's probe, a section of its own
    best = doc["plan"]["best"]["1"]
    assert best["method"] == "mtp"  # on this toy the head's 3/1/4 wins at batch 1; the plan's heading names it
    assert f"The MTP head (mtp 3/1/4) pays off at batch 1: {best['speedup']:.2f}x" in page
