"""Parse the dtype and device names users type (``bf16``, ``cuda:1``) into torch objects."""

from __future__ import annotations

import torch

from draftlab.errors import DraftlabError

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name.lower().removeprefix("torch.")]
    except KeyError:
        raise DraftlabError(f"unknown dtype {name!r}; choose float32, bfloat16 or float16") from None


def parse_device(name: str) -> torch.device:
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DraftlabError(f"unknown device {name!r}; use cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DraftlabError(f"device {name!r} asked for but CUDA is not available here; use --device cpu")
    return device
