"""The draft vocabulary of an EAGLE-3 drafter as one validated value: :class:`VocabMapping`.

The encoding and its validity rule are written once, in :mod:`draftlab.checkpoint.d2t`; as SGLang
and vLLM read it: ``d2t`` is an int64 array of length Vd holding OFFSETS, so
draft id ``i`` proposes target id ``i + d2t[i]``; ``t2d`` is a bool mask over the V target ids,
true exactly for the target ids in the draft vocabulary. Target ids are strictly increasing in
draft order (SpecForge and EAGLE sort them), so ``d2t`` is non-decreasing and non-negative.

A mapping comes from a drafter checkpoint (either layout; the buffers are named ``d2t``/``t2d``
in both), from a mapping file (safetensors, or SpecForge's ``torch.save({"d2t", "t2d"})`` dict,
read with ``weights_only=True``), or from a list of target ids. Both are numpy arrays, read without
torch (which is imported only for ``.pt`` files and ``.bin`` checkpoints); callers that need tensors
wrap them with ``torch.from_numpy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from draftlab.checkpoint import DrafterConfig, is_drafter, open_checkpoint
from draftlab.checkpoint.arrays import read_array, read_arrays, save_arrays, tensor_array
from draftlab.checkpoint.d2t import validate_d2t
from draftlab.checkpoint.safetensors_header import TORCH_NAMES, read_header
from draftlab.errors import DraftlabError
from draftlab.fsutil import atomic_path
from draftlab.readable import regular_file

MAPPING_FORMATS = ("safetensors", "pt")


@dataclass(frozen=True)
class VocabMapping:
    """A validated draft vocabulary: ``d2t`` int64 offsets [Vd], ``t2d`` bool mask [V] (numpy arrays)."""

    d2t: np.ndarray
    t2d: np.ndarray
    vocab_size: int

    @property
    def draft_size(self) -> int:
        return self.d2t.size

    @property
    def target_ids(self) -> np.ndarray:
        """Target id of each draft id, ascending (int64 [Vd])."""
        return np.arange(self.draft_size, dtype=np.int64) + self.d2t

    @classmethod
    def from_arrays(cls, d2t: Any, t2d: Any | None, vocab_size: int, *, source: str | Path) -> VocabMapping:
        """Validate raw buffers (:func:`validate_d2t`); a missing ``t2d`` is derived from ``d2t``."""
        d2t = np.asarray(d2t)
        t2d = None if t2d is None else np.asarray(t2d)
        problems = validate_d2t(d2t, t2d, vocab_size) if d2t.size else ["d2t is empty"]
        if problems:
            more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
            raise DraftlabError(f"invalid draft vocabulary: {problems[0]}{more}", path=source)
        mapping = cls(d2t.astype(np.int64), np.zeros(vocab_size, dtype=bool) if t2d is None else t2d.astype(bool),
                      vocab_size)
        if t2d is None:
            mapping.t2d[mapping.target_ids] = True
        return mapping

    @classmethod
    def from_target_ids(cls, ids: Any, vocab_size: int) -> VocabMapping:
        """The mapping whose draft id ``i`` proposes ``ids[i]`` (ids must be strictly increasing)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        return cls.from_arrays(ids - np.arange(ids.size, dtype=np.int64), None, vocab_size, source="target ids")

    @classmethod
    def from_drafter(cls, path: str | Path) -> VocabMapping:
        """The mapping stored in a drafter checkpoint, checked against its config and lm_head."""
        ckpt = open_checkpoint(path)
        if not is_drafter(ckpt):
            archs = ckpt.config.get("architectures")
            what = f" ({archs[0]})" if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
            raise DraftlabError(f"is a model{what}, not an EAGLE-3 drafter: it holds no draft vocabulary mapping "
                                "(d2t/t2d); give a drafter folder or a mapping file (.safetensors / .pt)", path=path)
        cfg = DrafterConfig.from_dict(ckpt.config)
        head = ckpt.tensors.get("lm_head.weight")
        draft_size = head.shape[0] if head is not None else cfg.draft_vocab_size
        if draft_size != cfg.draft_vocab_size:
            raise DraftlabError(f"lm_head.weight has {draft_size} rows but config draft_vocab_size is "
                                f"{cfg.draft_vocab_size}; the checkpoint is inconsistent", path=ckpt.path)
        if "d2t" not in ckpt.tensors:
            if draft_size == cfg.vocab_size:
                return cls.identity(cfg.vocab_size)
            raise DraftlabError(f"has no d2t buffer but a {draft_size}-token draft vocabulary (target "
                                f"{cfg.vocab_size}); engines would map draft ids to the first {draft_size} "
                                "target ids. Add d2t/t2d (vocab build, then vocab remap)", path=ckpt.path)
        names = ["d2t"] + (["t2d"] if "t2d" in ckpt.tensors else [])
        for name in names:
            _refuse_float(name, TORCH_NAMES[ckpt.tensors[name].dtype], ckpt.path)
        arrays = read_arrays(ckpt, names)
        vocab_size = cfg.vocab_size or (arrays["t2d"].size if "t2d" in arrays else 0)
        mapping = cls.from_arrays(arrays["d2t"], arrays.get("t2d"), vocab_size, source=ckpt.path)
        if mapping.draft_size != draft_size:
            raise DraftlabError(f"d2t has {mapping.draft_size} entries but the drafter has {draft_size} "
                                "draft tokens (lm_head rows / draft_vocab_size)", path=ckpt.path)
        return mapping

    @classmethod
    def from_file(cls, path: str | Path, vocab_size: int | None = None) -> VocabMapping:
        """A mapping file: safetensors or a SpecForge ``.pt`` dict with ``d2t`` and ``t2d``.

        ``vocab_size`` defaults to the length of ``t2d``.
        """
        path = Path(path)
        regular_file(path, "no such mapping file")
        arrays = _read_safetensors(path) if path.suffix == ".safetensors" else _read_pt(path)
        if "d2t" not in arrays:
            raise DraftlabError("has no 'd2t' tensor; a mapping file holds d2t (int64 offsets) and t2d (bool)",
                                path=path)
        t2d = arrays.get("t2d")
        if vocab_size is None:
            if t2d is None:
                raise DraftlabError("has d2t but no t2d, so the target vocabulary size is unknown", path=path)
            vocab_size = t2d.size
        return cls.from_arrays(arrays["d2t"], t2d, vocab_size, source=path)

    @classmethod
    def identity(cls, vocab_size: int) -> VocabMapping:
        """The full target vocabulary (a drafter with draft_vocab_size == vocab_size)."""
        return cls(np.zeros(vocab_size, dtype=np.int64), np.ones(vocab_size, dtype=bool), vocab_size)

    def save(self, dest: str | Path, fmt: str = "safetensors") -> Path:
        """Write ``{"d2t", "t2d"}`` atomically as safetensors or as SpecForge's torch.save dict."""
        dest = Path(dest)
        if fmt not in MAPPING_FORMATS:
            raise DraftlabError(f"unknown mapping format {fmt!r}; choose one of {', '.join(MAPPING_FORMATS)}")
        with atomic_path(dest) as tmp:
            if fmt == "safetensors":
                save_arrays(tmp, {"d2t": ("I64", self.d2t), "t2d": ("BOOL", self.t2d)}, {"format": "pt"})
            else:
                import torch

                torch.save({"d2t": torch.from_numpy(self.d2t), "t2d": torch.from_numpy(self.t2d)}, tmp)
        return dest


def load_mapping(path: str | Path) -> VocabMapping:
    """A drafter folder, a drafter weights file beside its config.json, or a mapping file."""
    path = Path(path)
    if path.is_dir():
        return VocabMapping.from_drafter(path)
    if path.is_file() and (path.parent / "config.json").is_file() and path.suffix != ".pt":
        return VocabMapping.from_drafter(path)
    return VocabMapping.from_file(path)


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    infos, _ = read_header(path)  # one-line errors for every way the header can be wrong
    names = [n for n in ("d2t", "t2d") if n in infos]
    for name in names:
        _refuse_float(name, TORCH_NAMES[infos[name].dtype], path)
    return {name: read_array(infos[name]) for name in names}


def _read_pt(path: Path) -> dict[str, np.ndarray]:
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - corrupt pickles fail inside torch.load in many ways (IndexError, KeyError...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DraftlabError(f"cannot load as a weights-only PyTorch file ({first})", path=path) from None
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise DraftlabError("is not a dict of tensors like {'d2t': ..., 't2d': ...}", path=path)
    names = [n for n in ("d2t", "t2d") if n in obj]
    for name in names:
        _refuse_float(name, str(obj[name].dtype).removeprefix("torch."), path)
    return {name: tensor_array(obj[name]) for name in names}


def _refuse_float(name: str, dtype: str, path: Path) -> None:
    """A floating d2t/t2d is invalid; caught here, since bf16 and float8 bits would read as integers."""
    if "float" in dtype:
        expected = "bool" if name == "t2d" else "int64"
        raise DraftlabError(f"invalid draft vocabulary: {name} has dtype {dtype}; expected {expected}", path=path)
