"""The positions past which a probe's accept-length-by-context buckets are marked, from the drafter
as loaded (:mod:`draftlab.acceptance.by_context` marks them)."""

from __future__ import annotations

from draftlab.models.drafter import Eagle3Drafter


def context_limits(drafter: Eagle3Drafter) -> dict[str, int | None]:
    """``max_position_embeddings`` (the context it was made for), ``sliding_window`` (the window its config
    states: past it a drafter served without the window, as SGLang serves one unless launched with
    ``--speculative-draft-window-size``, sees more than it was trained on) and ``served_window`` (the window
    the engine applies, named only where the config states another, e.g. ``--draft-window`` given for a
    drafter trained with full attention)."""
    config = drafter.config
    served = next((w for w in drafter.windows if w is not None), None)
    return {"max_position_embeddings": config.max_position_embeddings, "sliding_window": config.sliding_window,
            "served_window": served if served != config.sliding_window else None}
