"""The page ``assess`` writes: the decision is the first heading, the evidence follows, nothing is fetched."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from chromium import load

sys.path.insert(0, str(Path(__file__).parents[1] / "assess"))
from costs import toy_profile

from draftlab.cli import main


def test_the_verdict_is_the_first_heading_and_the_page_stays_offline(toy_pair, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "def __init__(self, name", "category": "code"}) + "\n")
    out = tmp_path / "assess"
    code = main(["assess", "--drafter", str(toy_pair.drafter_dir), "--target", str(toy_pair.target_dir),
                 "--prompts", str(prompts), "--costs", str(toy_profile(tmp_path / "costs.json")), "--grid", "3/1/4",
                 "--batch-sizes", "1,8", "--max-new-tokens", "20", "--out", str(out)])
    assert code in (0, None)
    verdict = json.loads((out / "assess.json").read_text())["verdict"]
    loaded = load(out / "report.html", tmp_path, height=6000)
    assert loaded.page_requests == []
    headings = re.findall(r"<h([1-6])[^>]*>(.*?)</h\1>", loaded.dom)
    assert headings[0] == ("1", verdict["headline"])
    kinds = re.findall(r'data-kind="([^"]+)"', loaded.dom)
    assert kinds[0] == "assess" and {"probe", "plan", "check", "vocab-coverage"} <= set(kinds)
    assert str(tmp_path / "assess") in loaded.dom and ".tmp" not in loaded.dom
    ranges = json.loads((out / "assess.json").read_text())["schedule_plan"]["ranges"]
    assert "Schedule for sglang" in loaded.dom
    assert all(f"<td>{lo}-{hi}</td>" in loaded.dom for lo, hi, _ in ranges)
