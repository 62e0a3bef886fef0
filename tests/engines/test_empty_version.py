"""``--engine-version ''`` is refused in one line wherever a release is looked up, never taken for the newest."""

from __future__ import annotations

import pytest

from draftlab.acceptance.synthetic import SyntheticAcceptance
from draftlab.engines.schedule import check_release
from draftlab.engines.synthetic import synthetic_settings
from draftlab.errors import DraftlabError

PROFILE = SyntheticAcceptance("p.json", marginals=(0.8, 0.6, 0.4), profile="p.json")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("version", ["", "  "])
def test_synthetic_settings_refuse_an_empty_version(engine, version):
    with pytest.raises(DraftlabError, match="empty") as err:
        synthetic_settings(engine, PROFILE, steps=3, version=version)
    assert "\n" not in str(err.value)
    assert synthetic_settings(engine, PROFILE, steps=3).version is not None  # None: the newest, as documented


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_schedule_refuses_an_empty_version(engine):
    with pytest.raises(DraftlabError, match="empty|is not a TensorRT-LLM release") as err:
        check_release(engine, "")
    assert "\n" not in str(err.value)
    assert check_release(engine, None)  # the newest known


def test_a_post_release_resolves_to_its_base_rules():
    assert synthetic_settings("vllm", PROFILE, steps=3, version="0.30.0.post1").version == "0.30.0"
