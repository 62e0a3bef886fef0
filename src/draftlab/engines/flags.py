"""How one engine release reads a drafter's variant flags and sizes its ``fc``, from the config itself.

The places come from :mod:`draftlab.engines.releases` (``../shared/reference/drafter-variants.md``
sections 1-3 and 5); lookups follow the engines' own order (``eagle_config`` first, then the top level,
for ``norm_before_fc``). A key that is present decides, even when false; its value counts as the engines'
``getattr(config, key, False)`` branches on it, by Python truthiness (``"false"`` is on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from draftlab.checkpoint.configs import DrafterConfig
from draftlab.checkpoint.variants import FLAGS, first_present, lookup, truthy
from draftlab.engines.loading import drafter_class
from draftlab.engines.releases import Release

# Where draftlab itself finds each flag set (checkpoint.variants.FLAGS), in any layout.
ANY_PLACE = {f.name: f.places for f in FLAGS}


@dataclass(frozen=True)
class FlagReading:
    """One flag as the drafter sets it and as a release reads it."""

    flag: str
    set_at: tuple[str, ...]  # the places where the config sets it true
    places: tuple[str, ...]  # where the release reads it, in order (() = it never reads it)
    read: bool  # the value the release computes with

    @property
    def dropped(self) -> bool:
        """Set in the config, but the release computes without it."""
        return bool(self.set_at) and not self.read


def read_flag(rel: Release, config: Mapping[str, Any], drafter: DrafterConfig, flag: str) -> FlagReading:
    """How ``rel`` reads ``flag`` from this drafter's config."""
    places = rel.places(flag, drafter_class(drafter), drafter.layout)
    set_at = tuple(p for p in ANY_PLACE[flag] if truthy(lookup(config, p)))
    return FlagReading(flag, set_at, places, truthy(first_present(config, places)))


def fc_inputs(rel: Release, config: Mapping[str, Any], drafter: DrafterConfig) -> tuple[int, str] | None:
    """How many aux features a release builds the Llama drafter's ``fc`` for, and from which field.

    vLLM 0.22+ ``llama_eagle3.py``: ``num_aux_hidden_states``, else the nested ``eagle_config`` ids'
    count, else 3, ignoring the top-level ids (speculators issue #1065). None where the rule is not
    known (SGLang counts the ids it captures; older vLLM; the MLA drafter).
    """
    if not rel.fc_from_num_aux or drafter_class(drafter) != "llama":
        return None
    count = config.get("num_aux_hidden_states")
    if type(count) is int:
        return count, "num_aux_hidden_states"
    if drafter.eagle_config_aux_ids:
        return len(drafter.eagle_config_aux_ids), "eagle_config.eagle_aux_hidden_state_layer_ids"
    return 3, "the default (neither num_aux_hidden_states nor eagle_config ids is set)"
