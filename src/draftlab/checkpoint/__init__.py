"""Checkpoint reading from headers and configs only: see :func:`open_checkpoint`."""

from draftlab.checkpoint.configs import (
    DrafterConfig,
    TargetConfig,
    drafter_config,
    is_drafter,
    target_config,
    text_config,
)
from draftlab.checkpoint.reader import Checkpoint, open_checkpoint, read_json
from draftlab.checkpoint.rope import Rope
from draftlab.checkpoint.safetensors_header import TensorInfo

__all__ = [
    "Checkpoint", "DrafterConfig", "Rope", "TargetConfig", "TensorInfo",
    "drafter_config", "is_drafter", "open_checkpoint", "read_json", "target_config", "text_config",
]
