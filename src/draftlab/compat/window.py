"""Rules on the drafter's attention window: the window the release serves against the one it was trained with.

speculators trains sliding-window drafters by default (v0.7.0+: ``layer_types: ["sliding_attention"]``,
``sliding_window: 2048``). Which release applies the window is engines/window.py's rule: vLLM reads it from the
config (its Llama drafter in every release, its Qwen3 drafter from 0.26.0); SGLang reads none from the config and
applies one only when launched with ``--speculative-draft-window-size W`` (MLA drafters ignore the flag). A
drafter served with another window than it was trained with is a different function: acceptance changes with
context length and nothing fails. The commands that compute serve what the deployment serves (``--draft-window``
mirrors SGLang's flag), so this is a warning, not a refusal.
"""

from __future__ import annotations

from collections.abc import Iterator

from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair
from draftlab.engines.window import SGLANG_WINDOW_FLAG, VLLM_QWEN3_WINDOW_FIRST


def _shown(windows: tuple[int | None, ...]) -> str:
    """``sliding window 2048`` / ``full attention`` / a per-layer list when the layers differ."""
    names = ["full attention" if w is None else f"sliding window {w}" for w in windows]
    return names[0] if len(set(names)) == 1 else "[" + ", ".join(names) + "]"


def _why(pair: Pair, trained: int | None) -> tuple[str, str]:
    """Why the release serves another window than the trained one, and what to do."""
    rel, drafter = pair.release, pair.drafter
    if pair.engine == "sglang":
        if drafter.variant.mla is not None:
            return (f"{rel.name} reads no window from the config, and its MLA drafter ignores {SGLANG_WINDOW_FLAG}",
                    "serve it with vLLM, or use a drafter trained with full attention")
        if trained is None:
            why = (f"it is launched with {SGLANG_WINDOW_FLAG} {pair.draft_window}, which SGLang applies to every "
                   "layer of a Llama drafter")
            return why, f"launch without {SGLANG_WINDOW_FLAG}"
        why = (f"{rel.name} reads no window from the config (layer_types, sliding_window); it applies one only when "
               f"launched with {SGLANG_WINDOW_FLAG}, to every layer")
        fix = (f"launch SGLang with {SGLANG_WINDOW_FLAG} {trained} (draftlab launch sglang adds it; the computing "
               f"commands take --draft-window {trained})")
        return why, fix
    if drafter.variant.mla is not None:
        return f"{rel.name}'s MLA drafter (deepseek_eagle3.py) builds full attention", "serve it with full attention"
    return (f"{rel.name}'s Qwen3 drafter (qwen3_eagle3.py) reads the window from {VLLM_QWEN3_WINDOW_FIRST} only",
            f"serve it with vLLM >= {VLLM_QWEN3_WINDOW_FIRST}")


def served_window(pair: Pair) -> Iterator[Finding]:
    """The window the release serves differs from the one the drafter was trained with."""
    deployment = pair.deployment
    trained, served = deployment.trained_windows, deployment.windows
    if tuple(trained) == tuple(served):
        return
    window = next((w for w in trained if w is not None), None)
    why, fix = _why(pair, window)
    field = pair.layer_field("layer_types" if window is not None else "sliding_window")
    yield Finding("draft-window", "warning", field,
                  f"the drafter was trained with {_shown(trained)} but {deployment.release.name} serves it with "
                  f"{_shown(served)}: {why}, so the served drafter is a different function from the trained one "
                  "(acceptance then changes with context length, with no error)", fix)


RULES = (served_window,)
