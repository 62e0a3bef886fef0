"""Read and validate a safetensors header without reading tensor data.

Format: an 8-byte little-endian header length N, N bytes of JSON, then the data buffer. Each
entry maps a tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` with offsets
relative to the start of the data buffer. A header is checked before it is trusted: its length
against the file size and a sane bound (so a corrupt length never allocates gigabytes), its JSON,
every dtype, shape and byte range.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from draftlab import jsonio
from draftlab.errors import DraftlabError
from draftlab.readable import regular_file

# Bytes per element of each safetensors dtype.
DTYPE_SIZES: dict[str, float] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8,
    "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the bound the safetensors library itself enforces

# Torch-style names for the summary ("bfloat16"), and the safetensors spelling of torch dtypes.
TORCH_NAMES: dict[str, str] = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "I32": "int32",
    "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16", "BF16": "bfloat16",
    "F32": "float32", "F64": "float64", "C64": "complex64", "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "F4": "float4_e2m1fn_x2",
    "F6_E2M3": "float6_e2m3", "F6_E3M2": "float6_e3m2",
}
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2"})


@dataclass(frozen=True)
class TensorInfo:
    """Name, dtype and shape of one stored tensor, and where its bytes are."""

    name: str
    dtype: str  # safetensors spelling: "BF16", "F32", "I64", "BOOL", ...
    shape: tuple[int, ...]
    file: Path
    data_start: int = -1  # absolute byte offset in `file` (-1 for pickled .bin files)
    data_end: int = -1

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return math.ceil(self.numel * DTYPE_SIZES[self.dtype])


def read_header(path: Path) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Return the tensors and the ``__metadata__`` of one safetensors file.

    Raises :class:`DraftlabError` naming the file for every way the header can be wrong.
    """
    try:
        size = regular_file(path).stat().st_size
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise DraftlabError("not a safetensors file (shorter than its 8-byte header length)", path=path)
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER_BYTES:
                raise DraftlabError(
                    f"safetensors header claims {n} bytes, above the {MAX_HEADER_BYTES}-byte limit; "
                    "the file is corrupt or not safetensors", path=path)
            if n > size - 8:
                raise DraftlabError(
                    f"safetensors header length {n} runs past the end of the {size}-byte file; "
                    "the file is truncated or corrupt", path=path)
            raw = f.read(n)
    except OSError as exc:
        raise DraftlabError(f"cannot read ({exc.strerror or exc})", path=path) from None
    try:
        header = jsonio.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DraftlabError(f"malformed safetensors header (not valid JSON: {exc})", path=path) from None
    if not isinstance(header, dict):
        raise DraftlabError("malformed safetensors header (not a JSON object)", path=path)

    data_len = size - 8 - n
    base = 8 + n
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise DraftlabError("malformed safetensors header (__metadata__ is not an object)", path=path)
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        tensors[name] = _parse_entry(path, name, entry, base, data_len)
    _check_no_overlap(path, tensors)
    return tensors, {str(k): str(v) for k, v in metadata.items()}


def _parse_entry(path: Path, name: str, entry: object, base: int, data_len: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise DraftlabError(f"malformed safetensors header (entry {name!r} is not an object)", path=path)
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise DraftlabError(f"tensor {name!r} has unknown dtype {dtype!r}", path=path)
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise DraftlabError(f"tensor {name!r} has an invalid shape {shape!r}", path=path)
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(type(o) is int for o in offsets) or not 0 <= offsets[0] <= offsets[1]):
        raise DraftlabError(f"tensor {name!r} has invalid data_offsets {offsets!r}", path=path)
    begin, end = offsets
    if end > data_len:
        raise DraftlabError(
            f"tensor {name!r} data_offsets {offsets} lie outside the {data_len}-byte data buffer; "
            "the file is truncated or corrupt", path=path)
    info = TensorInfo(name, dtype, tuple(shape), path, base + begin, base + end)
    if end - begin != info.nbytes:
        raise DraftlabError(
            f"tensor {name!r} spans {end - begin} bytes but {dtype} {list(shape)} needs {info.nbytes}",
            path=path)
    return info


def _check_no_overlap(path: Path, tensors: dict[str, TensorInfo]) -> None:
    spans = sorted((t.data_start, t.data_end, t.name) for t in tensors.values() if t.data_end > t.data_start)
    for (_, end_a, name_a), (start_b, _, name_b) in zip(spans, spans[1:]):
        if start_b < end_a:
            raise DraftlabError(f"tensors {name_a!r} and {name_b!r} overlap in the data buffer", path=path)
