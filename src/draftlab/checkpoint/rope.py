"""A config's RoPE settings, read from both spellings: ``rope_theta`` + ``rope_scaling`` (transformers 4)
and ``rope_parameters`` (transformers 5). Targets and drafters read it alike (:mod:`draftlab.checkpoint.configs`),
and so does the MLA drafter's check (:mod:`draftlab.checkpoint.variants`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rope:
    theta: float | None
    scaling: dict[str, Any] | None  # None for plain RoPE; else includes "rope_type"

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Rope:
        params = cfg.get("rope_parameters")
        if isinstance(params, dict):
            theta = params.get("rope_theta", cfg.get("rope_theta"))
            scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        else:
            theta = cfg.get("rope_theta")
            scaling = dict(cfg["rope_scaling"]) if isinstance(cfg.get("rope_scaling"), dict) else None
        if scaling is not None:
            kind = scaling.get("rope_type", scaling.get("type", "default"))
            scaling = {**{k: v for k, v in scaling.items() if k != "type"}, "rope_type": kind}
            if kind == "default" and len(scaling) == 1:
                scaling = None
        return cls(float(theta) if theta is not None else None, scaling)
