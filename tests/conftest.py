"""Session fixtures shared across the test suite: tiny target configs and the trained toy pair."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():  # the split-KV attention kernels then run in Triton's interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernels are defined: before draftlab's imports

from draftlab.toy import ToyPair, cached_toy_pair
from draftlab.toy.mtp import MtpToy, cached_mtp_toy

sys.path.insert(0, str(Path(__file__).parent))

from builders import TINY_TARGETS, tiny_target_config  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Every model in the suite is tiny: threads gain nothing and, on a busy 2-core machine, OpenMP
    spinning slows many small steps ten-fold or more."""
    before, env = torch.get_num_threads(), os.environ.get("DRAFTLAB_THREADS")
    torch.set_num_threads(1)
    os.environ["DRAFTLAB_THREADS"] = "1"  # and the commands the tests run (draftlab.threads) keep to one
    yield
    torch.set_num_threads(before)
    if env is None:
        os.environ.pop("DRAFTLAB_THREADS", None)
    else:
        os.environ["DRAFTLAB_THREADS"] = env


@pytest.fixture(scope="session")
def target_configs() -> dict[str, dict]:
    return {name: tiny_target_config(name) for name in TINY_TARGETS}


@pytest.fixture(scope="session")
def toy_pair() -> ToyPair:
    """The trained toy target/drafter pair (built once, then reused from the draftlab cache)."""
    return cached_toy_pair()


@pytest.fixture(scope="session")
def mtp_toy() -> MtpToy:
    """The toy DeepSeek-V3 target with one trained MTP layer (built once, then reused from the draftlab cache)."""
    return cached_mtp_toy()
