"""Shared fixtures: tiny targets built from transformers config classes, drafters of both layouts,
and the trained toy pair."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from builders import TINY_TARGETS, tiny_target_config  # noqa: E402

from draftlab.toy import ToyPair, cached_toy_pair  # noqa: E402


@pytest.fixture(scope="session")
def target_configs() -> dict[str, dict]:
    return {name: tiny_target_config(name) for name in TINY_TARGETS}


@pytest.fixture(scope="session")
def toy_pair() -> ToyPair:
    """The trained toy target/drafter pair (built once, then reused from the draftlab cache)."""
    return cached_toy_pair()
