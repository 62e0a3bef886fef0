"""Read and validate a safetensors header without reading tensor data, exactly as the safetensors library does.

Format: an 8-byte little-endian header length N, N bytes of JSON, then the data buffer. Each
entry maps a tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` with offsets
relative to the start of the data buffer. The engines and draftlab's own loader open weights with the
safetensors library (``safetensors/src/tensor.rs``: ``read_metadata``, ``Metadata::validate``), so a file
it refuses never loads; :func:`read_header` refuses the same files, from the header and the file size:

- N at most 100,000,000 and within the file; the header UTF-8 JSON as serde_json reads it (no NaN or
  Infinity, no lone surrogate escapes, no control characters in strings, numbers within range, nesting at
  most 127 deep, ``-0`` a float), an object whose ``__metadata__`` (once) is null or maps strings to strings;
- each entry an object (or the 3-element array serde also takes) with ``dtype`` (one of the library's),
  ``shape`` (unsigned integers) and ``data_offsets`` (two unsigned integers), each field once;
- taken in offset order, the tensors tile the data buffer: the first begins at 0, each where the one before
  ends, no hole, no overlap, each spanning exactly its dtype's bits times its element count (a whole number
  of bytes), and the last ends at the end of the file (no trailing bytes).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draftlab.errors import DraftlabError
from draftlab.readable import regular_file

# Bytes per element of each safetensors dtype (safetensors 0.8's list; the sub-byte ones pack 4 or 6 bits).
DTYPE_SIZES: dict[str, float] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8,
    "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}
DTYPE_BITS: dict[str, int] = {name: int(size * 8) for name, size in DTYPE_SIZES.items()}

MAX_HEADER_BYTES = 100_000_000  # the bound the safetensors library enforces (MAX_HEADER_SIZE)
MAX_JSON_DEPTH = 127  # serde_json's recursion limit: 128 nested arrays/objects are refused
_USIZE = 2**64  # the library's offsets, shape entries and byte counts are usize (64-bit)
_ENTRY_FIELDS = ("dtype", "shape", "data_offsets")
NOT_LOADABLE = frozenset({"F6_E2M3", "F6_E3M2"})  # valid headers, but get_tensor(framework="pt") refuses them

# Torch-style names for the summary ("bfloat16"), and the safetensors spelling of torch dtypes.
TORCH_NAMES: dict[str, str] = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "I32": "int32",
    "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16", "BF16": "bfloat16",
    "F32": "float32", "F64": "float64", "C64": "complex64", "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz", "F4": "float4_e2m1fn_x2", "F6_E2M3": "float6_e2m3", "F6_E3M2": "float6_e3m2",
}
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
                          "F4", "F6_E2M3", "F6_E3M2"})


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

    Raises :class:`DraftlabError` naming the file for every file the safetensors library refuses to open.
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
    header = _parse_json(path, raw)
    metadata = _metadata(path, header)
    base, data_len = 8 + n, size - 8 - n
    tensors = {name: _parse_entry(path, name, entry, base, data_len)
               for name, entry in header.items() if name != "__metadata__"}
    _check_tiling(path, tensors, base, data_len)
    return tensors, metadata


class _Object(dict):
    """A JSON object as parsed, remembering the keys it repeats (serde refuses a repeated struct field)."""

    repeated: frozenset[str] = frozenset()


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    out = _Object(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        out.repeated = frozenset(k for k, _ in pairs if k in seen or seen.add(k))
    return out


def _number(text: str) -> int | float:
    """An integer literal as serde_json reads it: a float past 64 bits, and ``-0`` is -0.0."""
    value = int(text)
    if value >= _USIZE or value < -(2**63) or (value == 0 and text.startswith("-")):
        return _finite(text)
    return value


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:20]}")
    return value


def _refuse_constant(text: str) -> None:
    raise ValueError(f"{text} is not JSON")


def _parse_json(path: Path, raw: bytes) -> _Object:
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_object, parse_int=_number,
                            parse_float=_finite, parse_constant=_refuse_constant)
        _check_strings_and_depth(header)
    except (UnicodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise DraftlabError(f"malformed safetensors header (not valid JSON as the safetensors library reads it: "
                            f"{str(exc)[:120]})", path=path) from None
    if not isinstance(header, _Object):
        raise DraftlabError("malformed safetensors header (not a JSON object)", path=path)
    return header


def _check_strings_and_depth(document: Any) -> None:
    """serde_json refuses a lone surrogate escape (Python keeps it) and nesting past its recursion limit."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            value.encode("utf-8")  # UnicodeEncodeError on a lone surrogate
        elif isinstance(value, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested more than {MAX_JSON_DEPTH} deep")
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)


def _metadata(path: Path, header: _Object) -> dict[str, str]:
    if "__metadata__" in header.repeated:
        raise DraftlabError("malformed safetensors header (__metadata__ appears twice)", path=path)
    metadata = header.get("__metadata__")
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise DraftlabError("malformed safetensors header (__metadata__ must map strings to strings)", path=path)
    return dict(metadata)


def _fields(path: Path, name: str, entry: object) -> tuple[Any, Any, Any]:
    """An entry's dtype, shape and data_offsets (serde also reads a struct from an array of its 3 fields)."""
    if isinstance(entry, list) and len(entry) == 3:
        return entry[0], entry[1], entry[2]
    if not isinstance(entry, _Object):
        raise DraftlabError(f"malformed safetensors header (entry {name!r} is not an object)", path=path)
    twice = [k for k in _ENTRY_FIELDS if k in entry.repeated]
    if twice:
        raise DraftlabError(f"malformed safetensors header (entry {name!r} gives {twice[0]} twice)", path=path)
    return entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")


def _unsigned(value: object) -> bool:
    return type(value) is int and 0 <= value < _USIZE


def _parse_entry(path: Path, name: str, entry: object, base: int, data_len: int) -> TensorInfo:
    dtype, shape, offsets = _fields(path, name, entry)
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise DraftlabError(f"tensor {name!r} has unknown dtype {dtype!r}", path=path)
    if not isinstance(shape, list) or not all(_unsigned(d) for d in shape):
        raise DraftlabError(f"tensor {name!r} has an invalid shape {shape!r}", path=path)
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_unsigned(o) for o in offsets):
        raise DraftlabError(f"tensor {name!r} has invalid data_offsets {offsets!r}", path=path)
    begin, end = offsets
    if end > data_len and begin <= end:
        raise DraftlabError(
            f"tensor {name!r} data_offsets {offsets} lie outside the {data_len}-byte data buffer; "
            "the file is truncated or corrupt", path=path)
    if dtype in NOT_LOADABLE:
        raise DraftlabError(f"tensor {name!r} is {dtype}, which the safetensors library cannot load into PyTorch "
                            "('Dtype not understood')", path=path)
    bits = _bits(shape, DTYPE_BITS[dtype])
    if bits is None:
        raise DraftlabError(f"tensor {name!r}'s shape {shape} overflows the byte count the library computes",
                            path=path)
    if bits % 8:
        raise DraftlabError(f"tensor {name!r} is {dtype} {shape}: {bits} bits, not a whole number of bytes",
                            path=path)
    return TensorInfo(name, dtype, tuple(shape), path, base + begin, base + end)


def _bits(shape: list[int], bits_per_element: int) -> int | None:
    """Element count times bits, None where the library's 64-bit running product overflows."""
    total = 1
    for dim in [*shape, bits_per_element]:
        total *= dim
        if total >= _USIZE:
            return None
    return total


def _check_tiling(path: Path, tensors: dict[str, TensorInfo], base: int, data_len: int) -> None:
    """In offset order the tensors cover the data buffer exactly: no hole, no overlap, no trailing byte."""
    at, before = 0, None
    for info in sorted(tensors.values(), key=lambda t: (t.data_start, t.data_end)):
        start, stop = info.data_start - base, info.data_end - base
        if start != at or stop < start:
            where = (f"begins at byte {start} of the data buffer, where {before!r} ends at {at}" if before
                     else f"begins at byte {start} of the data buffer, not at 0")
            what = ("ends before it begins" if stop < start else "overlaps the tensor before it" if start < at
                    else "leaves unused bytes before it")
            raise DraftlabError(f"tensor {info.name!r} {where}: it {what}, which the safetensors library refuses",
                                path=path)
        if stop - start != info.nbytes:
            raise DraftlabError(f"tensor {info.name!r} spans {stop - start} bytes but {info.dtype} "
                                f"{list(info.shape)} needs {info.nbytes}", path=path)
        at, before = stop, info.name
    if at != data_len:
        raise DraftlabError(f"{data_len - at} trailing byte(s) after the last tensor: the safetensors library refuses "
                            "a file its tensors do not cover exactly", path=path)
