"""Fixtures: a made-up profile and a probe result (see cost_fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cost_fixtures import profile_doc, write_json


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    return write_json(tmp_path / "profile.json", profile_doc())


@pytest.fixture
def probe_file(tmp_path: Path) -> Path:
    """A probe result for the chain 3/1/4 with accept length 2.5."""
    return write_json(tmp_path / "probe.json", {
        "config": {"steps": 3, "topk": 1, "num_draft_tokens": 4},
        "mean_accept_length": 2.5,
        "results": [{"prompt_index": 0, "accept_lengths": [3, 2, 4, 1], "num_cycles": 4}],
    })
