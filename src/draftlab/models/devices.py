"""Parse the dtype and device names users type (``bf16``, ``cuda:1``) into torch objects, and decide
where a model goes: one device, or split by a device map."""

from __future__ import annotations

import importlib.util

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


def default_dtype(device: str | None, device_map: str | None = None) -> str:
    """The dtype a model runs in when none is asked for: bfloat16 on GPUs (what engines serve in),
    float32 on the CPU (bf16 matmuls there are slow and the reference is float32)."""
    split = device_map is not None and torch.cuda.is_available()  # with no GPU a device map places on the CPU
    on_gpu = split or (device is not None and device.startswith("cuda"))
    return "bfloat16" if on_gpu else "float32"


def parse_device(name: str) -> torch.device:
    """``name`` as a device that exists here: cpu, cuda[:N] with N below the GPU count, or mps where
    torch has it; anything else is one line saying what this machine offers."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DraftlabError(f"unknown device {name!r}; use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise DraftlabError(f"device {name!r} asked for but CUDA is not available here; use --device cpu")
        if device.index is not None and device.index >= count:
            raise DraftlabError(f"device {name!r} does not exist: this machine has {count} GPU(s), "
                                f"cuda:0..cuda:{count - 1}")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise DraftlabError(f"device {name!r} asked for but this machine or torch build has no MPS (Apple GPU); "
                                "use --device cpu")
    elif device.type != "cpu":
        raise DraftlabError(f"device {name!r} is not supported; use cpu, cuda or cuda:N")
    return device


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); nothing to wait for on the CPU. For wall-clock timing."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def resolve_placement(device: str | None, device_map: str | None) -> tuple[str | None, str | None]:
    """Where a target goes: ``(device, None)``, one device (default cpu), or ``(None, device_map)``, split
    across the GPUs by one of transformers' strategies (through accelerate); never both."""
    if device_map is None:
        return device or "cpu", None
    if device is not None:
        raise DraftlabError(f"--device {device} and --device-map {device_map} exclude each other: give --device to "
                            "put the target on one device, or --device-map to split it across the GPUs")
    if device_map not in DEVICE_MAPS:
        raise DraftlabError(f"unknown device map {device_map!r}; choose {', '.join(DEVICE_MAPS)}")
    if importlib.util.find_spec("accelerate") is None:
        raise DraftlabError("--device-map needs the accelerate package; pip install accelerate")
    return None, device_map


def offloaded(device_map: dict[str, object]) -> str | None:
    """Where a device map spilled part of a model off the GPUs ("disk" or "cpu"), None if it did not.
    All on the CPU is a plain CPU placement (no GPU here), not a spill."""
    placed = {str(v) for v in device_map.values()}
    if "disk" in placed:
        return "disk"
    return "cpu" if "cpu" in placed and placed - {"cpu"} else None


def model_devices(model: torch.nn.Module) -> list[str]:
    """The devices a model's parameters live on, in first-use order (more than one: split by a device map)."""
    return list(dict.fromkeys(str(p.device) for p in model.parameters()))
