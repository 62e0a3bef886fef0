"""A probe result as an acceptance profile (ModelOpt's schema, :mod:`draftlab.acceptance.profile`): its
histogram, per-prompt and per-category accept lengths, and the conditions it was measured under."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from draftlab.acceptance.profile import (
    PRODUCER,
    AcceptanceProfile,
    check_profile,
    rates_from_histogram,
    validation,
)
from draftlab.probe.probe import ProbeResult


def profile_from_probe(result: ProbeResult, *, prompts: str | Path | None = None,
                       categories: Sequence[str | None] | Mapping[int, str | None] | None = None
                       ) -> AcceptanceProfile:
    """The acceptance profile of one probe result (its histogram, per-prompt accept lengths and config).

    ``categories[i]`` is prompt i's ``category`` (file order, as ``prompt_index``: a list, or a mapping
    as ``{i: row.category for i, row in enumerate(read_prompts(...))}``); prompts without
    one are left out of ``per_category``, which is null when no prompt has one. At temperature > 0 the
    histogram holds the probe's expected shares (``measurement_conditions.estimate`` is true) and
    the per-category figures are the per-request expected accept lengths only.
    """
    cfg = result.config
    steps, topk, ndt = int(cfg["steps"]), int(cfg["topk"]), int(cfg["num_draft_tokens"])
    marginal, conditional = rates_from_histogram(result.accept_length_histogram, steps)
    chain = topk == 1
    per_request = _per_request_mean(result.results)
    profile = AcceptanceProfile(
        num_speculative_tokens=steps, conditional_accept_rates=conditional, marginal_accept_rates=marginal,
        mean_accept_length=result.mean_accept_length,
        draft_checkpoint=_checkpoint(cfg.get("drafter")), target_model=_checkpoint(cfg.get("target")),
        max_supported_k=steps, mean_accept_length_per_request=per_request,
        accept_length_model="chain_analytic" if chain else "measured_per_k",
        accept_length_by_k={str(steps): result.mean_accept_length} if chain else {},
        acceptance_length_histogram={str(i): n for i, n in enumerate(result.accept_length_histogram) if i >= 1},
        per_category=_per_category(result, steps, categories),
        measurement_conditions=_conditions(result, prompts),
        validation=validation(marginal, result.mean_accept_length),
        speculation_config={"steps": steps, "topk": topk, "num_draft_tokens": ndt},
    )
    check_profile(profile, "the profile")
    return profile


def _checkpoint(path: Any) -> dict[str, Any] | None:
    return None if path is None else {"path": str(path), "name": Path(str(path)).name}


def _per_request_mean(results: Sequence[Any]) -> float | None:
    means = [r.expected_accept_length if r.expected_accept_length is not None
             else sum(r.accept_lengths) / len(r.accept_lengths)
             for r in results if r.accept_lengths or r.expected_accept_length is not None]
    return sum(means) / len(means) if means else None


def _per_category(result: ProbeResult, steps: int, categories: Sequence[str | None] | Mapping[int, str | None] | None
                  ) -> dict[str, dict[str, Any]] | None:
    if not categories:
        return None
    of = categories if isinstance(categories, Mapping) else dict(enumerate(categories))
    groups: dict[str, list[Any]] = {}
    for r in result.results:
        name = of.get(r.prompt_index)
        if name is not None:
            groups.setdefault(name, []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for name, rows in sorted(groups.items()):
        lengths = [n for r in rows for n in r.accept_lengths]
        entry: dict[str, Any] = {"num_prompts": len(rows), "num_cycles": len(lengths),
                                 "mean_accept_length_per_request": _per_request_mean(rows)}
        if lengths:  # greedy: the exact figures of the category's cycles
            histogram = [0] * (steps + 2)
            for n in lengths:
                histogram[n] += 1
            marginal, conditional = rates_from_histogram(histogram, steps)
            entry.update(mean_accept_length=sum(lengths) / len(lengths), marginal_accept_rates=marginal,
                         conditional_accept_rates=conditional,
                         acceptance_length_histogram={str(i): n for i, n in enumerate(histogram) if i >= 1})
        else:
            entry["mean_accept_length"] = entry["mean_accept_length_per_request"]
        out[name] = entry
    return out or None


def _conditions(result: ProbeResult, prompts: str | Path | None) -> dict[str, Any]:
    cfg = result.config
    keys = ("drafter", "target", "engine", "aux_layers", "steps", "topk", "num_draft_tokens", "flags_source",
            "responses", "features", "max_new_tokens", "temperature", "seed", "num_prompts", "dtype", "device")
    return {"producer": PRODUCER, **{k: cfg.get(k) for k in keys},
            "prompts": None if prompts is None else str(prompts), "skipped_prompts": result.skipped_prompts,
            "num_cycles": sum(r.num_cycles for r in result.results), "estimate": result.estimate,
            "target_disagreement": result.target_disagreement}
