"""Hidden states captured by a serving engine, for targets too large to run here.

Accepted layouts (one sample per file, files taken in the numeric order of their names):

- SpecForge offline EAGLE-3 features (``scripts/prepare_hidden_states.py``; ``rows_*/data_{i}.ckpt``):
  a ``torch.save`` dict with ``input_ids`` [n], ``loss_mask`` [n], ``hidden_state`` [1, n, T] (the
  final, post-norm state SGLang hands its logits processor) and ``aux_hidden_state`` [1, n, k*T]
  (the aux layers concatenated low to high);
- vLLM speculators, ``data_{i}.pt``: a dict with ``input_ids`` [n], ``hidden_states`` (a list of
  [n, T] tensors, one per captured layer) and ``loss_mask`` [n];
- vLLM ``extract_hidden_states`` / speculators ``hs_{i}.safetensors``: ``token_ids`` [n] and
  ``hidden_states`` [n, layers, T].

In the two speculators layouts, one layer more than the drafter's aux layers means the last one is
the final state after the norm (speculators' default capture list ends with the last layer, taken
after the norm). The final state, when present, gives the target's argmax through its ``lm_head``.
Which layers were captured is the capture's business: the probe checks only their number and width.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from draftlab.errors import DraftlabError
from draftlab.readable import input_folder, regular_file

PATTERNS = ("*.ckpt", "data_*.pt", "hs_*.safetensors")


@dataclass
class FeatureSample:
    path: Path
    input_ids: list[int]
    loss_mask: list[int] | None  # 1 on target-produced (assistant) tokens; None = everything after token 0
    aux: torch.Tensor  # [n, k*T]
    final_hidden: torch.Tensor | None  # [n, T] after the final norm, when captured


def feature_files(folder: str | Path) -> list[Path]:
    """Every sample file under ``folder`` (one layout only), in numeric order."""
    folder = Path(folder)
    input_folder(folder, "features folder not found")
    found = {pattern: sorted(folder.rglob(pattern), key=_order) for pattern in PATTERNS}
    layouts = [p for p, files in found.items() if files]
    if not layouts:
        raise DraftlabError("has no feature files (SpecForge data_*.ckpt, speculators data_*.pt or "
                            "hs_*.safetensors)", path=folder)
    if len(layouts) > 1:
        raise DraftlabError(f"mixes feature layouts ({', '.join(layouts)}); keep one per folder", path=folder)
    return found[layouts[0]]


def read_sample(path: Path, *, hidden_size: int, num_aux: int) -> FeatureSample:
    """One file, checked against the drafter: ``num_aux`` layers of width ``hidden_size``."""
    data = _load(path)
    if "aux_hidden_state" in data:  # SpecForge
        ids, aux = data.get("input_ids"), _squeeze(data["aux_hidden_state"], path)
        final = _squeeze(data["hidden_state"], path) if "hidden_state" in data else None
        _check_width(aux.shape[-1], hidden_size * num_aux, path, f"aux_hidden_state has width {aux.shape[-1]}")
        if final is not None:
            _check_width(final.shape[-1], hidden_size, path, f"hidden_state has width {final.shape[-1]}")
    elif "hidden_states" in data:  # speculators
        ids = data.get("input_ids", data.get("token_ids"))
        states = data["hidden_states"]
        layers = list(states) if isinstance(states, (list, tuple)) else list(states.unbind(1))
        if any(t.shape[-1] != hidden_size for t in layers):
            raise DraftlabError(f"hidden states have width {layers[0].shape[-1]} but the drafter takes target "
                                f"features of width {hidden_size}; these were captured from another target", path=path)
        if len(layers) not in (num_aux, num_aux + 1):
            raise DraftlabError(f"has {len(layers)} captured layers but the drafter fuses {num_aux} "
                                f"(or {num_aux} plus the final state); capture the drafter's aux layers", path=path)
        aux = torch.cat(layers[:num_aux], dim=-1)
        final = layers[num_aux] if len(layers) > num_aux else None
    else:
        raise DraftlabError("is not a feature file: no aux_hidden_state or hidden_states", path=path)
    if ids is None:
        raise DraftlabError("has no input_ids / token_ids", path=path)
    ids = torch.as_tensor(ids).reshape(-1).tolist()
    if aux.shape[0] != len(ids):
        raise DraftlabError(f"has {aux.shape[0]} feature rows for {len(ids)} tokens", path=path)
    mask = data.get("loss_mask")
    mask = None if mask is None else torch.as_tensor(mask).reshape(-1).long().tolist()
    if mask is not None and len(mask) != len(ids):
        raise DraftlabError(f"loss_mask has {len(mask)} entries for {len(ids)} tokens", path=path)
    return FeatureSample(path, ids, mask, aux, final)


def response_spans(sample: FeatureSample) -> list[tuple[int, int]]:
    """[start, end) of each run of target-produced tokens (a prompt needs at least one token)."""
    if sample.loss_mask is None:
        return [(1, len(sample.input_ids))] if len(sample.input_ids) > 1 else []
    spans, start = [], None
    for i, m in enumerate(sample.loss_mask + [0]):
        if m and start is None:
            start = max(i, 1)
        elif not m and start is not None:
            if i > start:
                spans.append((start, i))
            start = None
    return spans


def _load(path: Path) -> dict:
    regular_file(path)
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - corrupt files fail inside torch.load/safetensors in many ways (IndexError...)
        first = (str(exc).strip().splitlines() or [""])[0][:120]  # an EOFError has no message
        raise DraftlabError(f"cannot read feature file ({type(exc).__name__}: {first})",
                            path=path) from None
    if not isinstance(data, dict):
        raise DraftlabError("is not a feature file (expected a dict of tensors)", path=path)
    return data


def _squeeze(t: torch.Tensor, path: Path) -> torch.Tensor:
    if t.dim() == 3 and t.shape[0] == 1:
        return t[0]
    if t.dim() != 2:
        raise DraftlabError(f"feature tensor has shape {list(t.shape)}; expected [1, n, width] or [n, width]",
                            path=path)
    return t


def _check_width(got: int, want: int, path: Path, what: str) -> None:
    if got != want:
        raise DraftlabError(f"{what} but the drafter's fc takes {want} (its aux layers x target hidden size); "
                            "these features do not belong to this drafter's target or layers", path=path)


def _order(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", str(path)))
