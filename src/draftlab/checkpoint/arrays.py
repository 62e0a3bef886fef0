"""Stored tensors as numpy arrays of their exact bits: read, convert and write them without torch.

Safetensors data is mapped straight from the file at the offsets its header gives
(:mod:`~draftlab.checkpoint.safetensors_header`); ``.bin`` checkpoints go through torch, imported
only for them. Dtypes numpy lacks are held as their bit patterns (bf16 as uint16, float8 as uint8),
so copying rows copies bits. :func:`to_float32` and :func:`from_float32` convert floating dtypes the
way torch's ``.to()`` does (bf16 and f16 rounded to nearest, ties to even), for the few values
draftlab computes (vocab remap's ``mean`` rows).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from draftlab.checkpoint.reader import Checkpoint, load_pickled
from draftlab.checkpoint.safetensors_header import TORCH_NAMES, TensorInfo
from draftlab.errors import DraftlabError

if TYPE_CHECKING:
    import torch

# How each safetensors dtype is held: numpy's own type, or the bit pattern of one element.
STORAGE: dict[str, np.dtype] = {name: np.dtype(code) for name, code in {
    "BOOL": "?", "U8": "u1", "I8": "i1", "U16": "<u2", "I16": "<i2", "U32": "<u4", "I32": "<i4",
    "U64": "<u8", "I64": "<i8", "F16": "<f2", "F32": "<f4", "F64": "<f8", "C64": "<c8",
    "BF16": "<u2", "F8_E4M3": "u1", "F8_E5M2": "u1", "F8_E8M0": "u1",
}.items()}
DECODABLE = ("BF16", "F16", "F32", "F64")  # floating dtypes to_float32 / from_float32 handle
_FROM_TORCH = {torch_name: stored for stored, torch_name in TORCH_NAMES.items()}


def read_arrays(ckpt: Checkpoint, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The named tensors (all when ``names`` is None), each shaped and held as :data:`STORAGE` says.

    Safetensors tensors are read-only maps of the file: nothing is read until it is used.
    """
    wanted = list(ckpt.tensors) if names is None else list(names)
    missing = [n for n in wanted if n not in ckpt.tensors]
    if missing:
        raise DraftlabError(f"has no tensor {missing[0]!r}", path=ckpt.path)
    for name in wanted:
        _storage(ckpt.tensors[name])
    if ckpt.format == "safetensors":
        return {name: read_array(ckpt.tensors[name]) for name in wanted}
    out: dict[str, np.ndarray] = {}
    for file in dict.fromkeys(ckpt.tensors[n].file for n in wanted):
        state = load_pickled(file)
        out.update({n: tensor_array(state[n]) for n in wanted if ckpt.tensors[n].file == file})
    return out


def read_array(info: TensorInfo) -> np.ndarray:
    """One safetensors tensor as a read-only map of its bytes, shaped, held as :data:`STORAGE` says."""
    dtype = _storage(info)
    if info.nbytes == 0:
        return np.empty(info.shape, dtype=dtype)
    return np.memmap(info.file, dtype=dtype, mode="r", offset=info.data_start, shape=info.shape).view(np.ndarray)


def tensor_array(tensor: torch.Tensor) -> np.ndarray:
    """A CPU torch tensor's bits as a numpy array (bf16 as uint16, float8 as uint8), copied."""
    import torch

    stored = _FROM_TORCH.get(str(tensor.dtype).removeprefix("torch."))
    if stored not in STORAGE:
        raise DraftlabError(f"tensors of dtype {tensor.dtype} cannot be read as arrays")
    raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().copy()
    return raw.view(STORAGE[stored]).reshape(tuple(tensor.shape))


def save_arrays(path: Path, arrays: dict[str, tuple[str, np.ndarray]], metadata: dict[str, str]) -> None:
    """Write ``{name: (safetensors dtype, array of its STORAGE type)}`` as one safetensors file.

    Tensors are laid out widest element first, then by name (as the safetensors library does), so
    every tensor starts aligned to its element size.
    """
    order = sorted(arrays, key=lambda n: (-STORAGE[arrays[n][0]].itemsize, n))
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for name in order:
        dtype, array = arrays[name]
        if array.dtype.kind != STORAGE[dtype].kind or array.dtype.itemsize != STORAGE[dtype].itemsize:
            raise ValueError(f"{name}: a {dtype} tensor must be held as {STORAGE[dtype]}, got {array.dtype}")
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name in order:
            dtype, array = arrays[name]
            if array.size:
                f.write(memoryview(np.ascontiguousarray(array, dtype=STORAGE[dtype])).cast("B"))


def to_float32(array: np.ndarray, dtype: str) -> np.ndarray:
    """Values of a stored ``dtype`` tensor as float32 (exact for bf16/f16; f64 rounded to nearest)."""
    if dtype == "BF16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    if dtype in ("F16", "F32", "F64"):
        return array.astype(np.float32)
    raise DraftlabError(f"cannot convert {TORCH_NAMES.get(dtype, dtype)} values (only {', '.join(DECODABLE)})")


def from_float32(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 ``values`` stored as ``dtype``: rounded to nearest, ties to even, as torch's ``.to()``."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "BF16":
        bits = values.view(np.uint32)
        rounded = (bits + (((bits >> 16) & 1) + np.uint32(0x7FFF))) >> 16
        return np.where(np.isnan(values), np.uint16(0x7FC0), rounded.astype(np.uint16))
    if dtype in ("F16", "F32", "F64"):
        with np.errstate(over="ignore"):  # beyond float16's range is inf, as in torch
            return values.astype(STORAGE[dtype])
    raise DraftlabError(f"cannot convert values to {TORCH_NAMES.get(dtype, dtype)} (only {', '.join(DECODABLE)})")


def _storage(info: TensorInfo) -> np.dtype:
    if info.dtype not in STORAGE:
        raise DraftlabError(f"tensor {info.name!r} has dtype {info.dtype}, which draftlab cannot read as an array",
                            path=info.file)
    return STORAGE[info.dtype]
