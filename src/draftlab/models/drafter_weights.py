"""A drafter checkpoint's tensors under one naming: SpecForge's (``midlayer.*``, no ``model.`` prefix).

Accepted spellings: SpecForge / EAGLE / SGLang (``midlayer.*``), vLLM speculators (``layers.0.*``),
either with a ``model.`` prefix, and SGLang's legacy ``aux_norm_low/mid/high`` as ``fc_norm.{0,1,2}``; SGLang's
extra layers for ``num_hidden_layers > 1`` are ``additional_layers.{i}.*``. A Qwen3-architecture drafter's
per-head norms (``self_attn.q_norm`` / ``k_norm``) follow their layer's spelling. ``t2d`` is dropped: like both engines, draftlab maps ids through ``d2t``.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from draftlab.checkpoint.variants import canonical_tensor_name
from draftlab.errors import DraftlabError


def canonical_names(tensors: dict[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    """Rename to SpecForge names; refuse layouts whose meaning draftlab would have to guess."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        canon = canonical_tensor_name(name)
        if canon == "t2d":
            continue
        if canon.startswith("layers.0."):
            canon = "midlayer." + canon.removeprefix("layers.0.")
        elif re.match(r"layers\.[1-9]\d*\.", canon):
            raise DraftlabError(
                f"tensor {name!r}: multi-layer drafters in the speculators layout (layers.1+) run differently in "
                "vLLM and SGLang and are not supported; use the SGLang layout (additional_layers.*)", path=path)
        if canon in out:
            raise DraftlabError(f"tensor {name!r} duplicates {canon!r} under another spelling", path=path)
        out[canon] = tensor
    return out
