"""Validity of an EAGLE-3 draft-vocabulary mapping (the one place this rule is written).

``d2t`` holds int64 offsets: draft id ``i`` stands for target id ``i + d2t[i]``. SpecForge builds
it from the most frequent target ids sorted ascending, so a valid table maps the draft ids onto
strictly increasing, in-range target ids. ``t2d`` is a bool mask over the target vocabulary that
must be true exactly at those target ids. Both engines use ``d2t`` and ignore ``t2d``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_SHOW = 3  # offending entries quoted in a message


def draft_to_target_ids(d2t: Sequence[int]) -> list[int]:
    """The target id each draft id stands for."""
    return [i + int(off) for i, off in enumerate(d2t)]


def validate_d2t(d2t: Any, t2d: Any | None, vocab_size: int) -> list[str]:
    """Problems with a d2t offset table (and t2d mask, if given) for a target of ``vocab_size``.

    ``d2t`` and ``t2d`` may be torch tensors or plain sequences. Returns one plain sentence per
    problem; an empty list means the mapping is valid.
    """
    problems: list[str] = []
    offsets, bad = _flat_ints(d2t, "d2t", want_bool=False)
    if bad:
        return [bad]
    targets = draft_to_target_ids(offsets)
    out_of_range = [(i, t) for i, t in enumerate(targets) if not 0 <= t < vocab_size]
    if out_of_range:
        problems.append(f"d2t maps {len(out_of_range)} draft ids outside the target vocabulary "
                        f"[0, {vocab_size}): " + _pairs(out_of_range))
    seen: dict[int, int] = {}
    duplicates = []
    for i, t in enumerate(targets):
        if t in seen:
            duplicates.append((i, t))
        seen.setdefault(t, i)
    if duplicates:
        problems.append(f"d2t maps {len(duplicates)} draft ids onto a target id already taken: "
                        + _pairs(duplicates))
    descending = [(i, targets[i]) for i in range(1, len(targets)) if targets[i] < targets[i - 1]]
    if descending:
        problems.append(f"d2t target ids are not increasing at {len(descending)} places "
                        f"(SpecForge writes them sorted): " + _pairs(descending))
    if t2d is not None:
        problems += _t2d_problems(t2d, targets, vocab_size)
    return problems


def _t2d_problems(t2d: Any, targets: list[int], vocab_size: int) -> list[str]:
    mask, bad = _flat_ints(t2d, "t2d", want_bool=True)
    if bad:
        return [bad]
    if len(mask) != vocab_size:
        return [f"t2d has {len(mask)} entries but the target vocabulary has {vocab_size}"]
    marked = {i for i, v in enumerate(mask) if v}
    mapped = set(targets)
    missing = sorted(mapped - marked)
    extra = sorted(marked - mapped)
    problems = []
    if missing:
        problems.append(f"t2d is false at {len(missing)} target ids that d2t maps to, e.g. {missing[:_SHOW]}")
    if extra:
        problems.append(f"t2d is true at {len(extra)} target ids that no draft id maps to, e.g. {extra[:_SHOW]}")
    return problems


def _flat_ints(values: Any, name: str, *, want_bool: bool) -> tuple[list[int], str | None]:
    dtype = str(getattr(values, "dtype", ""))
    if getattr(values, "ndim", 1) != 1:
        return [], f"{name} must be one-dimensional, got shape {tuple(values.shape)}"
    if "float" in dtype or "complex" in dtype:
        return [], f"{name} has dtype {dtype}; expected {'bool' if want_bool else 'int64'}"
    items = values.tolist() if hasattr(values, "tolist") else list(values)
    if not all(isinstance(v, int) for v in items):
        return [], f"{name} holds non-integer values"
    if want_bool and any(v not in (0, 1) for v in items):
        return [], f"{name} holds values other than true/false"
    return [int(v) for v in items], None


def _pairs(pairs: list[tuple[int, int]]) -> str:
    shown = ", ".join(f"draft {i} -> target {t}" for i, t in pairs[:_SHOW])
    return shown + (", ..." if len(pairs) > _SHOW else "")
