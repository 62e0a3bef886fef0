"""Open a model checkpoint (a folder, or one weights file beside its config.json) from headers only.

Supported weight sets, in the order they are looked for:
``model.safetensors.index.json``, ``model.safetensors``, ``pytorch_model.bin.index.json``,
``pytorch_model.bin``, or else every ``*.safetensors`` file in the folder. Names, shapes and dtypes
come from safetensors headers; ``.bin`` files are opened only with
``torch.load(weights_only=True, mmap=True)``, which never unpickles arbitrary objects and reads
no tensor bytes until they are touched.

Every file read (config, index, weights) must lie inside the checkpoint folder once symlinks are
resolved, or, in a Hugging Face cache snapshot (``.../snapshots/REV``), in that repository's
``blobs`` folder: a published checkpoint cannot make draftlab read (or ``check --fix`` and
``convert`` copy) a file from elsewhere on the machine.
"""

from __future__ import annotations

import json
import stat
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from draftlab import jsonio
from draftlab.checkpoint.safetensors_header import FLOAT_DTYPES, TORCH_NAMES, TensorInfo, read_header
from draftlab.errors import DraftlabError
from draftlab.readable import present, regular_file, stat_input

if TYPE_CHECKING:
    import torch

INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")

_TORCH_TO_ST = {
    "torch.bfloat16": "BF16", "torch.float16": "F16", "torch.float32": "F32", "torch.float64": "F64",
    "torch.int64": "I64", "torch.int32": "I32", "torch.int16": "I16", "torch.int8": "I8",
    "torch.uint8": "U8", "torch.bool": "BOOL", "torch.float8_e4m3fn": "F8_E4M3",
    "torch.float8_e5m2": "F8_E5M2",
}


_INT_TYPECODES = {"BOOL": "B", "U8": "B", "I8": "b", "I16": "h", "U16": "H", "I32": "i", "U32": "I",
                  "I64": "q", "U64": "Q"}


@dataclass
class Checkpoint:
    """A checkpoint's config and tensor catalogue; tensor data is read only by :meth:`load`."""

    path: Path  # the folder holding config.json
    config: dict[str, Any]
    tensors: dict[str, TensorInfo]
    weight_files: list[Path]
    format: str  # "safetensors" or "pytorch"
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def size_on_disk(self) -> int:
        return sum(f.stat().st_size for f in self.weight_files)

    @property
    def num_parameters(self) -> int:
        """Elements of all floating-point tensors (integer/bool buffers such as d2t/t2d excluded)."""
        return sum(t.numel for t in self.tensors.values() if t.dtype in FLOAT_DTYPES)

    @property
    def dtype(self) -> str | None:
        """The floating-point dtype holding most bytes, torch-style ("bfloat16"); None if no floats."""
        by_dtype: dict[str, int] = {}
        for t in self.tensors.values():
            if t.dtype in FLOAT_DTYPES:
                by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.nbytes
        return TORCH_NAMES[max(by_dtype, key=by_dtype.__getitem__)] if by_dtype else None

    def read_ints(self, name: str) -> list[int]:
        """The values of a small integer or bool tensor (d2t, t2d) as a flat list.

        Safetensors bytes are read directly at the header's offsets, without torch.
        """
        info = self.tensors.get(name)
        if info is None:
            raise DraftlabError(f"has no tensor {name!r}", path=self.path)
        if self.format != "safetensors":
            return [int(v) for v in self.load([name])[name].flatten().tolist()]
        typecode = _INT_TYPECODES.get(info.dtype)
        if typecode is None:
            raise DraftlabError(f"tensor {name!r} has dtype {info.dtype}, expected an integer or bool tensor",
                                path=info.file)
        with info.file.open("rb") as f:
            f.seek(info.data_start)
            raw = f.read(info.data_end - info.data_start)
        values = array(typecode)
        values.frombytes(raw)
        if sys.byteorder == "big" and values.itemsize > 1:
            values.byteswap()
        return values.tolist()

    def load(self, names: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
        """Read the named tensors (all when ``names`` is None) into CPU memory."""
        wanted = list(self.tensors) if names is None else list(names)
        missing = [n for n in wanted if n not in self.tensors]
        if missing:
            raise DraftlabError(f"has no tensor {missing[0]!r}", path=self.path)
        by_file: dict[Path, list[str]] = {}
        for name in wanted:
            by_file.setdefault(self.tensors[name].file, []).append(name)
        out: dict[str, torch.Tensor] = {}
        for file, file_names in by_file.items():
            if self.format == "safetensors":
                from safetensors import safe_open

                with safe_open(str(file), framework="pt") as f:
                    for name in file_names:
                        out[name] = f.get_tensor(name)
            else:
                state = load_pickled(file)
                for name in file_names:
                    out[name] = state[name].clone()
        return out


def open_checkpoint(path: str | Path) -> Checkpoint:
    """Open ``path`` (a checkpoint folder or a weights file beside a config.json)."""
    path = Path(path)
    try:
        return _open(path)
    except PermissionError as exc:
        raise DraftlabError(f"cannot read ({exc.strerror})", path=exc.filename or path) from None
    except OSError as exc:
        raise DraftlabError(f"cannot read ({exc.strerror or exc})", path=exc.filename or path) from None


def _open(path: Path) -> Checkpoint:
    if not stat.S_ISDIR(stat_input(path, "no such file or folder").st_mode):
        folder, files = path.parent, [regular_file(path)]
        fmt = _format_of(path)
        weight_map: dict[str, str] | None = None
    else:
        folder = path
        files, fmt, weight_map = _find_weight_files(folder)
    config = read_json(inside_checkpoint(folder, folder / "config.json"))
    for file in files:
        regular_file(inside_checkpoint(folder, file))
    if not isinstance(config, dict):
        raise DraftlabError("config must be a JSON object", path=folder / "config.json")

    tensors: dict[str, TensorInfo] = {}
    metadata: dict[str, str] = {}
    for file in files:
        if fmt == "safetensors":
            file_tensors, file_meta = read_header(file)
            metadata.update(file_meta)
        else:
            file_tensors = _bin_catalogue(file)
        for name, info in file_tensors.items():
            if name in tensors:
                raise DraftlabError(f"tensor {name!r} is stored twice (also in {tensors[name].file.name})", path=file)
            tensors[name] = info
    if weight_map is not None:
        _check_index_matches(folder, weight_map, tensors)
    return Checkpoint(folder, config, tensors, files, fmt, metadata)


def read_json(path: Path) -> Any:
    """Parse a JSON file, turning every failure into a one-line :class:`DraftlabError`."""
    try:
        text = regular_file(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise DraftlabError(f"cannot read ({exc})", path=path) from None
    try:
        return jsonio.loads(text)
    except json.JSONDecodeError as exc:
        raise DraftlabError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", path=path) from None


def _format_of(file: Path) -> str:
    if file.suffix == ".safetensors":
        return "safetensors"
    if file.suffix in (".bin", ".pt", ".pth"):
        return "pytorch"
    raise DraftlabError("unsupported weights file; expected .safetensors or .bin", path=file)


def _find_weight_files(folder: Path) -> tuple[list[Path], str, dict[str, str] | None]:
    for index_name, fmt in (("model.safetensors.index.json", "safetensors"),
                            ("pytorch_model.bin.index.json", "pytorch")):
        index = folder / index_name
        if present(index):
            weight_map = _read_index(inside_checkpoint(folder, index))
            return _files_from_index(folder, index, weight_map), fmt, weight_map
    for single, fmt in (("model.safetensors", "safetensors"), ("pytorch_model.bin", "pytorch")):
        if present(folder / single):
            return [folder / single], fmt, None
    found = sorted(folder.glob("*.safetensors"))
    if found:
        return found, "safetensors", None
    raise DraftlabError(
        "no weights found (looked for model.safetensors[.index.json], pytorch_model.bin[.index.json], *.safetensors)",
        path=folder)


def _read_index(index: Path) -> dict[str, str]:
    data = read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise DraftlabError("index has no weight_map object", path=index)
    for name, file in weight_map.items():
        if not isinstance(file, str):
            raise DraftlabError(f"weight_map entry {name!r} -> {file!r} is not a file name", path=index)
    return weight_map


def _files_from_index(folder: Path, index: Path, weight_map: dict[str, str]) -> list[Path]:
    """The shard files an index names, each checked to be a plain name inside ``folder``.

    The check is on the name, not the resolved target, so a Hugging Face cache snapshot (whose
    shards are symlinks into ``../../blobs``) is accepted while ``../x`` or ``/etc/x`` is refused.
    """
    files: list[Path] = []
    for name in dict.fromkeys(weight_map.values()):
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or ".." in parts or "\\" in name:
            raise DraftlabError(f"weight_map names {name!r}, outside the checkpoint folder; refusing it", path=index)
        file = folder / name
        if not present(file):
            raise DraftlabError(f"weight_map names {name!r}, which does not exist", path=index)
        files.append(file)
    return files


def inside_checkpoint(folder: Path, file: Path) -> Path:
    """``file``, refused when it resolves outside ``folder`` (a symlink out of the checkpoint).

    A Hugging Face cache snapshot's files are symlinks into ``../../blobs``: those are accepted.
    A file that does not exist is returned as is (the caller reports it).
    """
    if file.parent == folder and not file.is_symlink():
        return file
    try:
        root, real = folder.resolve(), file.resolve()
    except RuntimeError:  # Python < 3.13: a symlink loop
        stat_input(file)  # says so in one line
        raise
    allowed = [root]
    if root.parent.name == "snapshots":
        allowed.append(root.parent.parent / "blobs")
    if not any(real.is_relative_to(a) for a in allowed):
        raise DraftlabError(f"resolves to {real}, outside the checkpoint folder {root}; refusing to read it "
                            "(copy the file into the folder if it is meant to be there)", path=file)
    return file


def _check_index_matches(folder: Path, weight_map: dict[str, str], tensors: dict[str, TensorInfo]) -> None:
    for name, file in weight_map.items():
        info = tensors.get(name)
        if info is None or info.file != folder / file:
            raise DraftlabError(
                f"index says tensor {name!r} is in {file}, but that file does not hold it; the index is stale",
                path=folder / next(n for n in INDEX_NAMES if (folder / n).exists()))


def load_pickled(file: Path) -> dict[str, torch.Tensor]:
    import torch

    try:
        state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # noqa: BLE001 - corrupt pickles fail inside torch.load in many ways (IndexError, KeyError...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DraftlabError(f"cannot load as a weights-only PyTorch file ({first})", path=file) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise DraftlabError("is not a flat dict of tensors", path=file)
    return state


def _bin_catalogue(file: Path) -> dict[str, TensorInfo]:
    state = load_pickled(file)
    out: dict[str, TensorInfo] = {}
    for name, tensor in state.items():
        dtype = _TORCH_TO_ST.get(str(tensor.dtype))
        if dtype is None:
            raise DraftlabError(f"tensor {name!r} has unsupported dtype {tensor.dtype}", path=file)
        out[name] = TensorInfo(name, dtype, tuple(tensor.shape), file)
    return out
