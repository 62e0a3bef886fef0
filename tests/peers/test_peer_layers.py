"""speculators 0.9.0's own Eagle3 model computes sliding-window and Qwen3-architecture drafters as draftlab does.

A draftlab drafter converted to speculators' layout, its layer turned into what ``speculators train`` writes
(``layer_types: ["sliding_attention"]`` with ``sliding_window``; ``--draft-arch qwen3``: model_type qwen3 and
per-head ``q_norm``/``k_norm`` tensors): speculators' ``Eagle3DraftModel.forward`` (its ``_build_attn_mask``
with the window, eager attention) gives draftlab's logits within 1e-5 on inputs four windows long; the
same weights read without the window, or without the norms, would not.
"""

from __future__ import annotations

import json

import pytest
import torch
from peer_kinds import (
    HEAD_DIM,
    inputs,
    make_target,
    peer_import_error,
    skip_reason,
    speculators_step,
    write_flat_drafter,
)
from safetensors.torch import load_file, save_file

from draftlab.compat.convert import convert_drafter
from draftlab.models.drafter import Eagle3Drafter

TOLERANCE = 1e-5
WINDOW = 4
N = 16  # tokens: four windows
WINDOWED = {"layer_types": ["sliding_attention"], "sliding_window": WINDOW, "use_sliding_window": True}
CASES = {"llama+window": ("llama", WINDOWED), "qwen3": ("qwen3", {}), "qwen3+window": ("qwen3", WINDOWED)}


@pytest.fixture(autouse=True)
def _speculators() -> None:
    why = peer_import_error("speculators")
    if why is not None:
        pytest.skip(skip_reason("speculators", why))


def _speculators_drafter(tmp_path, model_type: str, fields: dict):
    target = make_target(tmp_path)
    folder = convert_drafter(write_flat_drafter(tmp_path / "flat"), "speculators", tmp_path / "spec", target=target).out
    config = json.loads((folder / "config.json").read_text())
    config["transformer_layer_config"].update(model_type=model_type, **fields)
    (folder / "config.json").write_text(json.dumps(config))
    if model_type == "qwen3":
        tensors = load_file(str(folder / "model.safetensors"))
        prefix = next(k for k in tensors if k.endswith("self_attn.q_proj.weight")).removesuffix("q_proj.weight")
        g = torch.Generator().manual_seed(7)
        for name in ("q_norm", "k_norm"):
            tensors[f"{prefix}{name}.weight"] = 1 + 0.5 * torch.randn(HEAD_DIM, generator=g)
        save_file(tensors, str(folder / "model.safetensors"))
    return folder


def _draftlab(drafter: Eagle3Drafter, ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    n = ids.numel()
    with torch.no_grad():
        logits, _, _ = drafter.forward_masked(ids[None], hidden[None], torch.arange(n)[None],
                                              torch.ones(n, n, dtype=torch.bool).tril()[None])
    return logits[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_speculators_own_model_gives_draftlabs_logits(tmp_path, case: str) -> None:
    model_type, fields = CASES[case]
    folder = _speculators_drafter(tmp_path, model_type, fields)
    ids, hidden = inputs(N)
    peer_logits, _ = speculators_step(folder, ids, hidden)
    drafter = Eagle3Drafter.load(folder, use_target_embedding=False)
    assert drafter.config.layer_kind == model_type
    assert drafter.windows == ((WINDOW,) if fields else (None,))
    assert (peer_logits - _draftlab(drafter, ids, hidden)).abs().max().item() <= TOLERANCE
    if fields:  # the window matters on these inputs
        full = Eagle3Drafter.load(folder, use_target_embedding=False, windows=(None,))
        assert (peer_logits - _draftlab(full, ids, hidden)).abs().max().item() > 100 * TOLERANCE
    if model_type == "qwen3":  # and so do the norms
        with torch.no_grad():
            drafter.midlayer.self_attn.q_norm.weight.fill_(1.0)
            drafter.midlayer.self_attn.k_norm.weight.fill_(1.0)
        assert (peer_logits - _draftlab(drafter, ids, hidden)).abs().max().item() > 100 * TOLERANCE
