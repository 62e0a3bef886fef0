"""What a run writes into OUT, each file atomically (temp file + rename):

- ``config.json`` + ``model.safetensors``: the drafter in SpecForge's layout (no embedding, which
  serving takes from the target; ``d2t`` and ``t2d`` for a pruned draft vocabulary), loadable by SGLang
  and vLLM at every checkpoint; a Qwen3-architecture warm start stays in speculators' layout (``layers.0.``
  names), the only one that states its layer;
- ``training_state.pt``: everything ``--resume`` needs to continue exactly: float32 weights,
  optimizer, scheduler, data order, RNG states, step and the log so far.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from draftlab.checkpoint import DrafterConfig
from draftlab.checkpoint.variants import NORM_OUTPUT_TRAINED, TRAINED_KEY, boolean_flags
from draftlab.errors import DraftlabError
from draftlab.fsutil import atomic_path, write_json_atomic
from draftlab.models.devices import parse_dtype
from draftlab.models.drafter import Eagle3Drafter

STATE_FILE = "training_state.pt"


def export_drafter(out: Path, drafter: Eagle3Drafter, t2d: torch.Tensor, config: dict[str, Any], *,
                   with_embedding: bool = False) -> None:
    """The serving folder's two files; weights cast to the config's dtype. The embedding is
    saved only when it is the drafter's own (hidden size unlike the target's: engines then read it)."""
    config = boolean_flags(config)  # "false" kept from an --init drafter would turn the flag on in the engines
    cfg = DrafterConfig.from_dict(config)
    dtype = parse_dtype(cfg.dtype or "float32")
    own = drafter.checkpoint_tensors()
    if with_embedding:
        own["embed_tokens.weight"] = drafter.embed_tokens.weight
    layer = "layers.0." if cfg.layout == "speculators" else "midlayer."  # a warm start's layout is kept
    tensors = {k.replace("midlayer.", layer, 1): (v.detach().to("cpu", dtype) if v.is_floating_point()
                                                   else v.detach().cpu()).contiguous() for k, v in own.items()}
    if cfg.draft_vocab_size < cfg.vocab_size:
        tensors["t2d"] = t2d.detach().cpu().to(torch.bool).contiguous()
    else:  # the whole vocabulary: d2t is the identity, which vLLM 0.30+ refuses to load (check's d2t-full-vocab)
        del tensors["d2t"]
    with atomic_path(out / "model.safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    if config.get("norm_output") is True:  # this trainer feeds norm(out) forward, as the engines serve it
        ours = config.get(TRAINED_KEY) if isinstance(config.get(TRAINED_KEY), dict) else {}
        config = {**config, TRAINED_KEY: {**ours, "norm_output": NORM_OUTPUT_TRAINED}}
    write_json_atomic(out / "config.json", config)


def sliding_window_fields(window: int, num_layers: int) -> dict[str, Any]:
    """The config keys of a drafter whose every layer attends to the last ``window`` positions, as speculators
    writes them (its ``train/cli.py``): what vLLM's drafters and ``DrafterConfig.layer_windows`` read."""
    return {"layer_types": ["sliding_attention"] * num_layers, "use_sliding_window": True, "sliding_window": window}


def save_state(out: Path, state: dict[str, Any]) -> None:
    with atomic_path(out / STATE_FILE) as tmp:
        torch.save(state, tmp)


def load_state(out: Path) -> dict[str, Any]:
    path = out / STATE_FILE
    if not path.is_file():
        raise DraftlabError(f"has no {STATE_FILE} to resume from (was it written by draftlab train?)", path=out)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: say which
        raise DraftlabError(f"cannot read {STATE_FILE} ({type(exc).__name__}: {exc})", path=out) from None


def rng_state() -> dict[str, Any]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
