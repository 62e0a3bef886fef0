"""Which attention window an engine release gives a drafter's layers: the served function, not the trained one.

From ``../shared/reference/engine-releases-2026-12.md``:

- vLLM reads the window from the drafter's config: its Llama drafter (``llama_eagle3.py`` building
  ``llama.py``'s attention) takes ``layer_types[i]`` and ``sliding_window`` in every known release; its Qwen3
  drafter (``qwen3_eagle3.py``) from 0.26.0. It has no server flag for it.
- SGLang reads no window from the config (``llama_eagle3.py``): it applies one only when launched with
  ``--speculative-draft-window-size W``, to every layer of a Llama drafter; MLA drafters ignore the flag.
"""

from __future__ import annotations

from draftlab.checkpoint.configs import DrafterConfig
from draftlab.engines.releases import Release
from draftlab.errors import DraftlabError

SGLANG_WINDOW_FLAG = "--speculative-draft-window-size"
VLLM_QWEN3_WINDOW_FIRST = "0.26.0"  # qwen3_eagle3.py passes the config's window to its attention


def served_windows(release: Release, drafter: DrafterConfig, draft_window: int | None = None
                   ) -> tuple[int | None, ...]:
    """The window each of the drafter's layers attends with when ``release`` serves it (None: full attention).
    ``draft_window`` is SGLang's server flag (``--speculative-draft-window-size``); vLLM has none."""
    layers = drafter.layer_windows or (None,) * drafter.num_layers
    if release.engine == "vllm":
        if draft_window is not None:
            raise DraftlabError(f"--draft-window mirrors SGLang's {SGLANG_WINDOW_FLAG}; vLLM has no such flag and "
                                "reads the window from the drafter's config (layer_types, sliding_window)")
        if drafter.variant.mla is not None:
            return (None,) * len(layers)
        if drafter.layer_kind == "qwen3" and not release.at(VLLM_QWEN3_WINDOW_FIRST):
            return (None,) * len(layers)
        return tuple(layers)
    if draft_window is None or drafter.variant.mla is not None:
        return (None,) * len(layers)
    return (draft_window,) * len(layers)

