"""refuse_unloadable: the commands that load a pair refuse what ``check`` rejects, from headers only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import folder_hash, make_pair, with_tensors

from draftlab.checkpoint import drafter_config, open_checkpoint, target_config
from draftlab.compat import check_pair
from draftlab.compat.loadable import refuse_unloadable
from draftlab.engines.deployment import Deployment
from draftlab.errors import DraftlabError

H = 64


def deployment(drafter: Path, target: Path, engine: str, version: str | None = None,
               draft_window: int | None = None) -> Deployment:
    return Deployment.resolve(engine, version, drafter_config(open_checkpoint(drafter)),
                              target_config(open_checkpoint(target)), draft_window)


def test_a_clean_pair_passes(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    for engine in ("sglang", "vllm"):
        refuse_unloadable(drafter, target, deployment(drafter, target, engine))


def test_refuses_what_check_rejects_in_one_line_before_any_weight_is_read(tmp_path, target_configs, monkeypatch):
    drafter, target = make_pair(tmp_path, target_configs["llama"], vocab_size=256)
    before = folder_hash(drafter), folder_hash(target)
    assert not check_pair(drafter, target, "vllm").ok

    def no_weights(*_a, **_k):
        raise AssertionError("a weight was read")

    monkeypatch.setattr("draftlab.checkpoint.reader.Checkpoint.load", no_weights)
    with pytest.raises(DraftlabError) as err:
        refuse_unloadable(drafter, target, deployment(drafter, target, "vllm", "0.30.0"))
    line = str(err.value)
    assert "\n" not in line and line.startswith(str(drafter)) and "vocab-size" in line
    assert "vLLM 0.30.0" in line and "draftlab check --engine vllm --engine-version 0.30.0" in line
    assert (folder_hash(drafter), folder_hash(target)) == before


def test_follows_the_release_asked(tmp_path, target_configs):
    """fc_norm is read by SGLang from 0.5.12: refused on 0.5.11 (the norms dropped), run on 0.5.12."""
    drafter, target = make_pair(tmp_path, target_configs["llama"], fc_norm=True)
    with_tensors(drafter, {f"fc_norm.{i}.weight": ("BF16", (H,)) for i in range(3)})
    refuse_unloadable(drafter, target, deployment(drafter, target, "sglang", "0.5.12"))
    with pytest.raises(DraftlabError, match="variant-unread"):
        refuse_unloadable(drafter, target, deployment(drafter, target, "sglang", "0.5.11"))


def test_a_short_context_is_not_refused(tmp_path, target_configs):
    """The one error an engine can be told to live with (SGLang's context override)."""
    drafter, target = make_pair(tmp_path, target_configs["llama"], max_position_embeddings=512)
    assert [f.code for f in check_pair(drafter, target, "sglang").findings if f.severity == "error"] \
        == ["context-too-short"]
    refuse_unloadable(drafter, target, deployment(drafter, target, "sglang"))
    assert json.loads((drafter / "config.json").read_text())["max_position_embeddings"] == 512
