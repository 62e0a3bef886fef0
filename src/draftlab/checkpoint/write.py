"""Copy a checkpoint's weights to a new folder, bit for bit, optionally renaming tensors.

A file whose tensor names stay the same is hard-linked (or copied where links are impossible).
A safetensors file with renamed tensors gets a new header naming the same dtypes, shapes and
offsets, followed by the original data buffer copied byte for byte: no tensor is decoded.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from draftlab.checkpoint.reader import INDEX_NAMES, Checkpoint, load_pickled


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link ``src`` at ``dst``; copy it where the filesystem does not allow a link."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def write_weights(ckpt: Checkpoint, out: Path, renames: dict[str, str]) -> None:
    """Write ``ckpt``'s weight files (and index) into the folder ``out`` with ``renames`` applied."""
    for file in ckpt.weight_files:
        dst = out / file.name
        names = {n for n, t in ckpt.tensors.items() if t.file == file}
        if not names & renames.keys():
            link_or_copy(file, dst)
        elif ckpt.format == "safetensors":
            _rename_safetensors(file, dst, renames)
        else:
            _rename_pickled(file, dst, renames)
    for index_name in INDEX_NAMES:
        index = ckpt.path / index_name
        if index.exists():
            data = json.loads(index.read_text())
            data["weight_map"] = {renames.get(k, k): v for k, v in data["weight_map"].items()}
            (out / index_name).write_text(json.dumps(data, indent=2) + "\n")


def _rename_safetensors(src: Path, dst: Path, renames: dict[str, str]) -> None:
    with src.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        renamed = {renames.get(k, k): v for k, v in header.items()}
        raw = json.dumps(renamed, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # keep the data buffer 8-byte aligned, as safetensors does
        with dst.open("wb") as g:
            g.write(struct.pack("<Q", len(raw)))
            g.write(raw)
            shutil.copyfileobj(f, g, length=16 * 1024 * 1024)


def _rename_pickled(src: Path, dst: Path, renames: dict[str, str]) -> None:
    import torch

    state = load_pickled(src)
    torch.save({renames.get(k, k): v for k, v in state.items()}, dst)
