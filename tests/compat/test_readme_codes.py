"""Every finding code ``check`` can emit is in the README's table of finding codes (codes are an interface)."""

from __future__ import annotations

import re
from pathlib import Path

from draftlab.compat import variants

ROOT = Path(__file__).resolve().parents[2]


def test_every_finding_code_is_in_the_readme_table():
    sources = (ROOT / "src" / "draftlab" / "compat").glob("*.py")
    codes = {c for path in sources for c in re.findall(r'Finding\(\s*"([a-z0-9-]+)"', path.read_text())}
    codes |= set(variants._CODES.values())
    table = (ROOT / "README.md").read_text().split("Finding codes (stable):", 1)[1].split("\n###", 1)[0]
    listed = set(re.findall(r"`([a-z0-9-]+)`", table))
    assert len(codes) > 40 and codes <= listed, sorted(codes - listed)
