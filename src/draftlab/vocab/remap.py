"""Rewrite a drafter for a new draft vocabulary without losing what its lm_head learned.

Row ``i`` of a drafter's ``lm_head`` scores draft id ``i``, i.e. target token ``i + d2t[i]``. A new
mapping moves tokens to new draft positions, so every token in both vocabularies gets its old row,
copied bit for bit to its new position; rows of new tokens are initialised as chosen:

- ``target-lm-head``: the target's own lm_head row of that token (its input embedding row when
  the target ties them), a warm start that needs equal hidden sizes;
- ``mean``: the mean of the drafter's old rows; ``zeros``: zeros.

d2t/t2d are replaced, ``draft_vocab_size`` in config.json updated, every other tensor written
unchanged; the config is written as every loader builds it (:mod:`draftlab.engines.written_config`).
The output is a new folder (config.json + model.safetensors) built atomically; the
input is only read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from draftlab.checkpoint import DrafterConfig, TargetConfig, is_drafter, open_checkpoint
from draftlab.engines.written_config import loadable_config
from draftlab.errors import DraftlabError
from draftlab.fsutil import atomic_dir
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
    if output.exists():
        raise DraftlabError("already exists; choose a new output folder", path=output)

    ckpt = open_checkpoint(drafter)
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

    tensors = ckpt.load()
    head = tensors["lm_head.weight"]
    position = torch.full((old.vocab_size,), -1, dtype=torch.int64)
    position[old.target_ids] = torch.arange(old.draft_size)
    new_ids = mapping.target_ids
    source = position[new_ids]
    kept = source >= 0
    new_head = torch.empty((mapping.draft_size, head.shape[1]), dtype=head.dtype)
    new_head[kept] = head[source[kept]]
    fresh_ids = new_ids[~kept]
    new_head[~kept] = _initial_rows(init, head, fresh_ids, cfg, target)

    tensors["lm_head.weight"] = new_head
    tensors["d2t"] = mapping.d2t.clone()
    tensors["t2d"] = mapping.t2d.clone()
    fc = tensors.get("fc.weight")  # SGLang and SpecForge size fc as 3 x target_hidden_size
    config = loadable_config({**ckpt.config, "draft_vocab_size": mapping.draft_size},
                             target_hidden_size=fc.shape[1] // 3 if fc is not None and fc.dim() == 2 else None)
    with atomic_dir(output) as tmp:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    kept_ids = set(new_ids[kept].tolist())
    dropped = [t for t in old.target_ids.tolist() if t not in kept_ids]
    return RemapResult(output, cfg.layout, old.draft_size, mapping.draft_size, int(kept.sum()),
                       int(fresh_ids.numel()), len(dropped), init, fresh_ids.tolist(), dropped)


def _initial_rows(init: str, head: torch.Tensor, token_ids: torch.Tensor, cfg: DrafterConfig,
                  target: str | Path | None) -> torch.Tensor:
    """Rows for tokens new to the draft vocabulary, in ``head``'s dtype."""
    n = token_ids.numel()
    if init == "zeros":
        return torch.zeros((n, head.shape[1]), dtype=head.dtype)
    if init == "mean":
        return head.to(torch.float32).mean(dim=0).to(head.dtype).expand(n, -1)
    assert target is not None
    return _target_rows(Path(target), token_ids, cfg).to(head.dtype)


def _target_rows(target: Path, token_ids: torch.Tensor, cfg: DrafterConfig) -> torch.Tensor:
    """The target's output-embedding rows of ``token_ids`` (lm_head, or embed_tokens when tied)."""
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
    weight = ckpt.load([name])[name]
    if weight.dim() != 2 or weight.shape[0] < cfg.vocab_size or weight.shape[1] != cfg.hidden_size:
        raise DraftlabError(f"{name} has shape {list(weight.shape)}, expected [{cfg.vocab_size}, "
                            f"{cfg.hidden_size}]", path=ckpt.path)
    return weight[token_ids]


def _output_embedding_name(names: dict[str, object], *, tied: bool) -> str | None:
    """The target's lm_head tensor, or its input embedding when the config ties the two."""
    for suffix in ("lm_head.weight",) + (("embed_tokens.weight",) if tied else ()):
        found = sorted(n for n in names if n == suffix or n.endswith("." + suffix))
        if found:
            return found[0]
    return None
