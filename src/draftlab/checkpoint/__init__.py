"""Checkpoint reading from headers and configs only: see :func:`open_checkpoint`."""

from draftlab.checkpoint.configs import DrafterConfig, Rope, TargetConfig, is_drafter, text_config
from draftlab.checkpoint.reader import Checkpoint, open_checkpoint, read_json
from draftlab.checkpoint.safetensors_header import TensorInfo

__all__ = [
    "Checkpoint", "DrafterConfig", "Rope", "TargetConfig", "TensorInfo",
    "is_drafter", "open_checkpoint", "read_json", "text_config",
]
