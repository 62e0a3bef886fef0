"""Copy a checkpoint's weights to a new folder, bit for bit, optionally renaming or dropping tensors.

A file whose tensor names stay the same is hard-linked (or copied where links are impossible).
A safetensors file with renamed tensors gets a new header naming the same dtypes, shapes and
offsets, followed by the original data buffer copied byte for byte: no tensor is decoded. Dropping
tensors closes their gaps: every kept tensor's bytes are copied unchanged at new offsets.
:func:`write_as_safetensors` also turns pickled ``.bin`` weights into safetensors files holding
the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any, BinaryIO

from draftlab.checkpoint.reader import INDEX_NAMES, Checkpoint, inside_checkpoint, load_pickled


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link ``src`` at ``dst``; copy it where the filesystem does not allow a link."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def write_weights(ckpt: Checkpoint, out: Path, renames: dict[str, str],
                  drop: frozenset[str] = frozenset()) -> None:
    """Write ``ckpt``'s weight files (and index) into the folder ``out`` with ``renames`` applied and the
    tensors named in ``drop`` left out."""
    for file in ckpt.weight_files:
        dst = out / file.name
        names = {n for n, t in ckpt.tensors.items() if t.file == file}
        if not names & (renames.keys() | drop):
            link_or_copy(file, dst)
        elif ckpt.format == "safetensors" and names & drop:
            _drop_safetensors(file, dst, renames, drop)
        elif ckpt.format == "safetensors":
            _rename_safetensors(file, dst, renames)
        else:
            _rename_pickled(file, dst, renames, drop)
    for index_name in INDEX_NAMES:
        index = ckpt.path / index_name
        if index.exists():
            data = json.loads(index.read_text())
            data["weight_map"] = {renames.get(k, k): v for k, v in data["weight_map"].items() if k not in drop}
            (out / index_name).write_text(json.dumps(data, indent=2) + "\n")


def _write_header(g: BinaryIO, header: dict[str, Any]) -> None:
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # keep the data buffer 8-byte aligned, as safetensors does
    g.write(struct.pack("<Q", len(raw)))
    g.write(raw)


def _rename_safetensors(src: Path, dst: Path, renames: dict[str, str]) -> None:
    with src.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        with dst.open("wb") as g:
            _write_header(g, {renames.get(k, k): v for k, v in header.items()})
            shutil.copyfileobj(f, g, length=16 * 1024 * 1024)


def _drop_safetensors(src: Path, dst: Path, renames: dict[str, str], drop: frozenset[str]) -> None:
    """The kept tensors in their stored order, each one's bytes copied unchanged, packed without the gaps
    the dropped ones leave (safetensors refuses a data buffer its tensors do not cover)."""
    with src.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        start = 8 + n
        kept = sorted(((k, v) for k, v in header.items() if k != "__metadata__" and k not in drop),
                      key=lambda item: item[1]["data_offsets"][0])
        out: dict[str, Any] = {"__metadata__": header["__metadata__"]} if "__metadata__" in header else {}
        offset = 0
        for name, info in kept:
            lo, hi = info["data_offsets"]
            out[renames.get(name, name)] = {**info, "data_offsets": [offset, offset + hi - lo]}
            offset += hi - lo
        with dst.open("wb") as g:
            _write_header(g, out)
            for _, info in kept:
                lo, hi = info["data_offsets"]
                f.seek(start + lo)
                _copy_bytes(f, g, hi - lo)


def _copy_bytes(f: BinaryIO, g: BinaryIO, count: int, chunk: int = 16 * 1024 * 1024) -> None:
    """The next ``count`` bytes of ``f`` onto ``g``, a chunk at a time."""
    while count > 0:
        block = f.read(min(chunk, count))
        if not block:
            raise OSError(f"{f.name}: the file ends inside a tensor's data")
        g.write(block)
        count -= len(block)


def _rename_pickled(src: Path, dst: Path, renames: dict[str, str], drop: frozenset[str]) -> None:
    import torch

    state = load_pickled(src)
    torch.save({renames.get(k, k): v for k, v in state.items() if k not in drop}, dst)


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
