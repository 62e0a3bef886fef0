"""Headless Chromium as a test harness: load a page from a file, and report what the page asked the
network for (Chromium's own net log), the DOM after loading, and a screenshot.

Chromium fetches things of its own (component updates, time, account checks) whatever the page is;
the net log tells them apart by their network isolation key, which for the page's requests is the
``file://`` origin the page was loaded from.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    """The Chromium binary; CI installs Debian's ``chromium`` (``.ci/run``), so there it must exist."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("DRAFTLAB_REQUIRE_CHROMIUM"):
            pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


@dataclass
class Loaded:
    dom: str
    page_requests: list[str]  # URLs the page itself asked for
    screenshot: Path


def load(page: Path, work: Path, *, width: int = 1100, height: int = 3000) -> Loaded:
    """Load ``page`` twice (DOM with the net log, then the screenshot) and collect what happened."""
    binary, url = chromium(), page.resolve().as_uri()
    netlog, shot = work / "netlog.json", work / "screenshot.png"
    profile = ["--user-data-dir=" + str(work / "profile")]
    done = subprocess.run([binary, *FLAGS, *profile, f"--log-net-log={netlog}", "--dump-dom", url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    subprocess.run([binary, *FLAGS, *profile, f"--window-size={width},{height}", f"--screenshot={shot}", url],
                   capture_output=True, text=True, timeout=120, check=True)
    return Loaded(done.stdout, _page_requests(netlog), shot)


def _page_requests(netlog: Path) -> list[str]:
    log = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in log["events"] if e["type"] == start
            and "file://" in e["params"].get("network_isolation_key", "")]
