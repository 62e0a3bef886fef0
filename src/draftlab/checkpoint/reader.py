"""Open a model checkpoint (a folder, or one weights file beside its config.json) from headers only.

Supported weight sets, in the order they are looked for:
``model.safetensors.index.json``, ``model.safetensors``, ``pytorch_model.bin.index.json``,
``pytorch_model.bin``, or else every ``*.safetensors`` file in the folder. Names, shapes and dtypes
come from safetensors headers; ``.bin`` files are opened only with
``torch.load(weights_only=True, mmap=True)``, which never unpickles arbitrary objects and reads
no tensor bytes until they are touched.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftlab.checkpoint.safetensors_header import TensorInfo, read_header
from draftlab.errors import DraftlabError

if TYPE_CHECKING:
    import torch

_TORCH_TO_ST = {
    "torch.bfloat16": "BF16", "torch.float16": "F16", "torch.float32": "F32", "torch.float64": "F64",
    "torch.int64": "I64", "torch.int32": "I32", "torch.int16": "I16", "torch.int8": "I8",
    "torch.uint8": "U8", "torch.bool": "BOOL", "torch.float8_e4m3fn": "F8_E4M3",
    "torch.float8_e5m2": "F8_E5M2",
}


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
        return sum(t.numel for t in self.tensors.values() if t.dtype.startswith(("F", "BF")))

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
                state = _torch_load(file)
                for name in file_names:
                    out[name] = state[name].clone()
        return out


def open_checkpoint(path: str | Path) -> Checkpoint:
    """Open ``path`` (a checkpoint folder or a weights file beside a config.json)."""
    path = Path(path)
    if not path.exists():
        raise DraftlabError("no such file or folder", path=path)
    if path.is_file():
        folder, files = path.parent, [path]
        fmt = _format_of(path)
    else:
        folder = path
        files, fmt = _find_weight_files(folder)
    config = read_json(folder / "config.json")
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
    return Checkpoint(folder, config, tensors, files, fmt, metadata)


def read_json(path: Path) -> Any:
    """Parse a JSON file, turning every failure into a one-line :class:`DraftlabError`."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise DraftlabError("not found", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DraftlabError(f"cannot read ({exc})", path=path) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DraftlabError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", path=path) from None


def _format_of(file: Path) -> str:
    if file.suffix == ".safetensors":
        return "safetensors"
    if file.suffix in (".bin", ".pt", ".pth"):
        return "pytorch"
    raise DraftlabError("unsupported weights file; expected .safetensors or .bin", path=file)


def _find_weight_files(folder: Path) -> tuple[list[Path], str]:
    for index_name, fmt in (("model.safetensors.index.json", "safetensors"),
                            ("pytorch_model.bin.index.json", "pytorch")):
        index = folder / index_name
        if index.exists():
            return _files_from_index(folder, index), fmt
    for single, fmt in (("model.safetensors", "safetensors"), ("pytorch_model.bin", "pytorch")):
        if (folder / single).exists():
            return [folder / single], fmt
    found = sorted(folder.glob("*.safetensors"))
    if found:
        return found, "safetensors"
    raise DraftlabError(
        "no weights found (looked for model.safetensors[.index.json], pytorch_model.bin[.index.json], *.safetensors)",
        path=folder)


def _files_from_index(folder: Path, index: Path) -> list[Path]:
    data = read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise DraftlabError("index has no weight_map object", path=index)
    root = folder.resolve()
    files: list[Path] = []
    for name in dict.fromkeys(weight_map.values()):
        if not isinstance(name, str):
            raise DraftlabError(f"weight_map value {name!r} is not a file name", path=index)
        file = (folder / name).resolve()
        if not file.is_relative_to(root):
            raise DraftlabError(f"weight_map names {name!r}, outside the checkpoint folder; refusing it", path=index)
        if not file.is_file():
            raise DraftlabError(f"weight_map names {name!r}, which does not exist", path=index)
        files.append(file)
    return files


def _torch_load(file: Path) -> dict[str, torch.Tensor]:
    import pickle

    import torch

    try:
        state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DraftlabError(f"cannot load as a weights-only PyTorch file ({first})", path=file) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise DraftlabError("is not a flat dict of tensors", path=file)
    return state


def _bin_catalogue(file: Path) -> dict[str, TensorInfo]:
    state = _torch_load(file)
    out: dict[str, TensorInfo] = {}
    for name, tensor in state.items():
        dtype = _TORCH_TO_ST.get(str(tensor.dtype))
        if dtype is None:
            raise DraftlabError(f"tensor {name!r} has unsupported dtype {tensor.dtype}", path=file)
        out[name] = TensorInfo(name, dtype, tuple(tensor.shape), file)
    return out
