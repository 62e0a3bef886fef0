"""Rewrite a drafter for a new draft vocabulary without losing what its lm_head learned.

Row ``i`` of a drafter's ``lm_head`` scores draft id ``i``, i.e. target token ``i + d2t[i]``. A new
mapping moves tokens to new draft positions, so every token in both vocabularies gets its old row,
copied bit for bit to its new position; rows of new tokens are initialised as chosen:

- ``target-lm-head``: the target's own lm_head row of that token (its input embedding row when
  the target ties them), a warm start that needs equal hidden sizes;
- ``mean``: the mean of the drafter's old rows; ``zeros``: zeros.

d2t/t2d are replaced, ``draft_vocab_size`` in config.json updated, every other tensor written
unchanged; the config is written as every loader builds it (:mod:`draftlab.engines.written_config`).
The output is a new folder (config.json + model.safetensors) built atomically; the input is only read.
Tensors are numpy arrays of their stored bits (:mod:`draftlab.checkpoint.arrays`), so rows move bit
for bit; only the ``mean`` row and a target row of another dtype are computed, in float32 and rounded
back to the drafter's dtype as torch rounds (to nearest, ties to even).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from draftlab.checkpoint import DrafterConfig, TargetConfig, is_drafter, open_checkpoint
from draftlab.checkpoint.arrays import from_float32, read_arrays, save_arrays, to_float32
from draftlab.engines.written_config import loadable_config
from draftlab.errors import DraftlabError
from draftlab.fsutil import atomic_dir, refuse_overlap
from draftlab.vocab.mapping import VocabMapping

INIT_METHODS = ("target-lm-head", "mean", "zeros")


@dataclass(frozen=True)
class RemapResult:
    output: Path
    layout: str
    old_size: int
    new_size: int
    kept: int  # rows copied bit-exactly (tokens in both vocabularies)
    new: int  # rows initialised with `init`
    dropped: int  # old rows whose token left the vocabulary
    init: str
    new_tokens: list[int]  # target ids, ascending
    dropped_tokens: list[int]


def remap_drafter(drafter: str | Path, mapping: VocabMapping, output: str | Path, *,
                  init: str | None = None, target: str | Path | None = None) -> RemapResult:
    """Write ``drafter`` re-based on ``mapping`` to the new folder ``output``.

    ``init`` defaults to ``target-lm-head`` when ``target`` is given, else ``mean``.
    """
    init = init or ("target-lm-head" if target is not None else "mean")
    if init not in INIT_METHODS:
        raise DraftlabError(f"unknown --init {init!r}; choose one of {', '.join(INIT_METHODS)}")
    if init == "target-lm-head" and target is None:
        raise DraftlabError("--init target-lm-head needs --target TARGET_DIR (the target checkpoint)")
    if init != "target-lm-head" and target is not None:
        raise DraftlabError(f"--target is only read by --init target-lm-head, not --init {init}")
    output = Path(output)
    ckpt = open_checkpoint(drafter)
    refuse_overlap(output, {"the drafter's folder": ckpt.path, "--target": target}, folder=True)
    if output.exists():
        raise DraftlabError("already exists; choose a new output folder", path=output)
    if not is_drafter(ckpt):
        raise DraftlabError("is not an EAGLE-3 drafter (no drafter architecture or fc/midlayer tensors)",
                            path=ckpt.path)
    cfg = DrafterConfig.from_dict(ckpt.config)
    if "lm_head.weight" not in ckpt.tensors:
        raise DraftlabError("has no lm_head.weight (it uses the target's head), so it has no draft "
                            "vocabulary to remap", path=ckpt.path)
    old = VocabMapping.from_drafter(drafter)
    if mapping.vocab_size != old.vocab_size:
        raise DraftlabError(f"the new mapping covers a {mapping.vocab_size}-token target vocabulary but the "
                            f"drafter's target has {old.vocab_size}; build it from counts of this target")

    arrays = read_arrays(ckpt)
    dtypes = {name: info.dtype for name, info in ckpt.tensors.items()}
    head, head_dtype = arrays["lm_head.weight"], dtypes["lm_head.weight"]
    position = np.full(old.vocab_size, -1, dtype=np.int64)
    position[old.target_ids] = np.arange(old.draft_size)
    new_ids = mapping.target_ids
    source = position[new_ids]
    kept = source >= 0
    new_head = np.empty((mapping.draft_size, head.shape[1]), dtype=head.dtype)
    new_head[kept] = head[source[kept]]
    fresh_ids = new_ids[~kept]
    new_head[~kept] = _initial_rows(init, head, head_dtype, fresh_ids, cfg, target)

    out = {name: (dtypes[name], array) for name, array in arrays.items()}
    out.update({"lm_head.weight": (head_dtype, new_head), "d2t": ("I64", mapping.d2t), "t2d": ("BOOL", mapping.t2d)})
    fc = arrays.get("fc.weight")  # SGLang and SpecForge size fc as 3 x target_hidden_size
    config = loadable_config({**ckpt.config, "draft_vocab_size": mapping.draft_size},
                             target_hidden_size=fc.shape[1] // 3 if fc is not None and fc.ndim == 2 else None)
    with atomic_dir(output) as tmp:
        save_arrays(tmp / "model.safetensors", out, metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    dropped = np.setdiff1d(old.target_ids, new_ids[kept]).tolist()
    return RemapResult(output, cfg.layout, old.draft_size, mapping.draft_size, int(kept.sum()),
                       int(fresh_ids.size), len(dropped), init, fresh_ids.tolist(), dropped)


def _initial_rows(init: str, head: np.ndarray, dtype: str, token_ids: np.ndarray, cfg: DrafterConfig,
                  target: str | Path | None) -> np.ndarray:
    """Rows for tokens new to the draft vocabulary, stored as ``head`` is (safetensors ``dtype``)."""
    n = token_ids.size
    if init == "zeros":
        return np.zeros((n, head.shape[1]), dtype=head.dtype)
    if init == "mean":
        # torch's head.float().mean(0) up to float32's last bit: torch sums float32 in blocks, whose
        # order depends on the CPU; a float64 sum rounded to float32 is as accurate, then / rows in float32
        total = to_float32(head, dtype).sum(axis=0, dtype=np.float64).astype(np.float32)
        mean = total / np.float32(head.shape[0])
        return np.broadcast_to(from_float32(mean, dtype), (n, head.shape[1]))
    assert target is not None
    rows, target_dtype = _target_rows(Path(target), token_ids, cfg)
    return rows if target_dtype == dtype else from_float32(to_float32(rows, target_dtype), dtype)


def _target_rows(target: Path, token_ids: np.ndarray, cfg: DrafterConfig) -> tuple[np.ndarray, str]:
    """The target's output-embedding rows of ``token_ids`` (lm_head, or embed_tokens when tied), and their dtype."""
    ckpt = open_checkpoint(target)
    try:
        tcfg = TargetConfig.from_dict(ckpt.config)
    except (KeyError, TypeError, ValueError) as exc:
        raise DraftlabError(f"config.json is not a causal-LM config (missing or bad field {exc})",
                            path=ckpt.path) from None
    if tcfg.vocab_size != cfg.vocab_size:
        raise DraftlabError(f"the target has vocab_size {tcfg.vocab_size} but the drafter was made for "
                            f"{cfg.vocab_size}; this is not the drafter's target", path=ckpt.path)
    if tcfg.hidden_size != cfg.hidden_size:
        raise DraftlabError(f"--init target-lm-head needs equal hidden sizes (drafter {cfg.hidden_size}, "
                            f"target {tcfg.hidden_size}); use --init mean or zeros", path=ckpt.path)
    name = _output_embedding_name(ckpt.tensors, tied=tcfg.tie_word_embeddings)
    if name is None:
        raise DraftlabError("has no lm_head.weight tensor (nor a tied embed_tokens.weight)", path=ckpt.path)
    shape = ckpt.tensors[name].shape
    if len(shape) != 2 or shape[0] < cfg.vocab_size or shape[1] != cfg.hidden_size:
        raise DraftlabError(f"{name} has shape {list(shape)}, expected [{cfg.vocab_size}, "
                            f"{cfg.hidden_size}]", path=ckpt.path)
    return read_arrays(ckpt, [name])[name][token_ids], ckpt.tensors[name].dtype


def _output_embedding_name(names: dict[str, object], *, tied: bool) -> str | None:
    """The target's lm_head tensor, or its input embedding when the config ties the two."""
    for suffix in ("lm_head.weight",) + (("embed_tokens.weight",) if tied else ()):
        found = sorted(n for n in names if n == suffix or n.endswith("." + suffix))
        if found:
            return found[0]
    return None
