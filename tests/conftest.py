"""Session fixtures shared across the test suite."""

from __future__ import annotations

import pytest

from draftlab.toy import ToyPair, cached_toy_pair


@pytest.fixture(scope="session")
def toy_pair() -> ToyPair:
    """The trained toy target/drafter pair (built once, then reused from the draftlab cache)."""
    return cached_toy_pair()
