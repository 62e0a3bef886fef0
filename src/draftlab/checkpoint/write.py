"""Copy a checkpoint's weights to a new folder, bit for bit, optionally renaming tensors.

A file whose tensor names stay the same is hard-linked (or copied where links are impossible).
A safetensors file with renamed tensors gets a new header naming the same dtypes, shapes and
offsets, followed by the original data buffer copied byte for byte: no tensor is decoded.
:func:`write_as_safetensors` also turns pickled ``.bin`` weights into safetensors files holding
the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from draftlab.checkpoint.reader import INDEX_NAMES, Checkpoint, inside_checkpoint, load_pickled


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


def write_as_safetensors(ckpt: Checkpoint, out: Path, renames: dict[str, str]) -> None:
    """Write ``ckpt``'s weights into ``out`` as safetensors with ``renames`` applied: safetensors files
    as :func:`write_weights` does, each ``.bin`` file as a safetensors file of the same tensor bytes
    (``pytorch_model*.bin`` -> ``model*.safetensors``, with a ``model.safetensors.index.json`` when the
    checkpoint had an index)."""
    if ckpt.format == "safetensors":
        write_weights(ckpt, out, renames)
        return
    from safetensors.torch import save_file

    weight_map: dict[str, str] = {}
    total = 0
    for file in ckpt.weight_files:
        name = safetensors_name(file)
        state = load_pickled(file)
        # contiguous copies: safetensors refuses tensors that share storage (tied weights)
        tensors = {renames.get(k, k): v.contiguous().clone() for k, v in state.items()}
        save_file(tensors, str(out / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(tensors, name))
        total += sum(t.numel() * t.element_size() for t in tensors.values())
    if (ckpt.path / "pytorch_model.bin.index.json").exists():
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def safetensors_name(file: Path) -> str:
    """The safetensors file name for a pickled weights file (``pytorch_model-00001-of-00002.bin`` ->
    ``model-00001-of-00002.safetensors``)."""
    return file.stem.replace("pytorch_model", "model") + ".safetensors" if file.suffix != ".safetensors" else file.name


def copy_other_files(ckpt: Checkpoint, out: Path) -> None:
    """Tokenizer files, generation config, README...: every file beside config and weights, each
    checked to stay inside the checkpoint folder (a symlink out of it is refused). Other ``*.safetensors``
    files are left behind: the engines would load them as weights (``check``'s stray-weights)."""
    skip = {"config.json", *INDEX_NAMES, *(f.name for f in ckpt.weight_files)}
    for item in ckpt.path.iterdir():
        if item.suffix == ".safetensors":
            continue
        if item.is_file() and item.name not in skip and not (out / item.name).exists():
            link_or_copy(inside_checkpoint(ckpt.path, item), out / item.name)
