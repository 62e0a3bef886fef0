"""A drafter and a target opened together, with lookups the rules share."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from draftlab.checkpoint import Checkpoint, DrafterConfig, TargetConfig, TensorInfo
from draftlab.engines import AuxLayers, intended_aux_layers
from draftlab.engines.deployment import Deployment
from draftlab.engines.releases import Release, release

LAYER_PREFIXES = ("midlayer.", "layers.0.")  # SpecForge/SGLang and vLLM speculators spellings


@dataclass
class Pair:
    engine: str
    drafter_ckpt: Checkpoint
    drafter: DrafterConfig
    target_ckpt: Checkpoint
    target: TargetConfig
    version: str | None = None  # the engine release whose rules apply (None: the newest draftlab knows)
    draft_window: int | None = None  # SGLang's --speculative-draft-window-size the pair is served with
    asked_version: str | None = None  # ``version`` as the user wrote it (``0.5.13.post1``), for the result

    @cached_property
    def release(self) -> Release:
        return release(self.engine, self.version)

    def layer_field(self, key: str) -> str:
        """The dotted config path of a decoder-layer field in the drafter's layout."""
        return f"transformer_layer_config.{key}" if self.drafter.layout == "speculators" else key

    def tensor(self, name: str) -> TensorInfo | None:
        """A top-level drafter tensor (``fc.weight``), with or without a ``model.`` prefix."""
        tensors = self.drafter_ckpt.tensors
        return tensors.get(name) or tensors.get(f"model.{name}")

    def layer_tensor(self, sub: str) -> TensorInfo | None:
        """A tensor of the first decoder layer (``self_attn.q_proj.weight``), in either naming."""
        for prefix in LAYER_PREFIXES:
            found = self.tensor(prefix + sub)
            if found is not None:
                return found
        return None

    @cached_property
    def captured(self) -> AuxLayers:
        """The target layers the engine will capture: the deployment's, which every command computes from."""
        return self.deployment.aux

    @cached_property
    def intended(self) -> AuxLayers:
        """The target layers the drafter was trained on, as far as its config says."""
        return intended_aux_layers(self.drafter, self.target.num_layers, target=self.target)

    @cached_property
    def d2t(self) -> list[int] | None:
        info = self.tensor("d2t")
        return self.drafter_ckpt.read_ints(info.name) if info is not None else None

    @cached_property
    def t2d(self) -> list[int] | None:
        info = self.tensor("t2d")
        return self.drafter_ckpt.read_ints(info.name) if info is not None else None

    @cached_property
    def deployment(self) -> Deployment:
        """What the release serves for this pair (windows per layer; engines/deployment.py)."""
        asked = self.asked_version if self.asked_version is not None else self.version
        return Deployment.resolve(self.engine, asked, self.drafter, self.target, self.draft_window)


def layer_dict(config: dict[str, Any]) -> dict[str, Any]:
    """The dict holding decoder-layer fields in a drafter config of either layout."""
    inner = config.get("transformer_layer_config")
    return inner if isinstance(inner, dict) else config
