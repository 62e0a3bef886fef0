"""A plan's prediction held against a measurement made with the same settings: agree, or DISAGREE.

``demo``'s plan step holds the predicted tok/s against ``generate``'s and ``assess`` holds its plan
against a measured speculative decode of the config it would serve; both print the same line, so a
prediction that the machine's own measurement contradicts is never shown as a verdict on its own.
"""

from __future__ import annotations

from typing import Any

AGREE = 0.15  # a prediction within this share of the measurement agrees with it


def held_against(what: str, predicted: float, measured: float) -> dict[str, Any]:
    """A prediction beside what was measured with the same settings; they agree within :data:`AGREE`.
    ``what`` names the measurement, then after a comma the figure (``"draftlab generate, 3/1/4 tok/s"``)."""
    gap = abs(predicted / measured - 1) if measured > 0 else float("inf")
    return {"what": what, "predicted": predicted, "measured": measured, "agrees": gap <= AGREE}


def check_sentence(check: dict[str, Any]) -> str:
    """One line for a check: they agree, or they disagree by how much (never two headline numbers alone)."""
    unit = "x" if "speedup" in check["what"] else " tok/s"
    digits = ".2f" if unit == "x" else ".0f"
    pair = (f"plan predicts {check['predicted']:{digits}}{unit}, {check['what'].split(',')[0]} measures "
            f"{check['measured']:{digits}}{unit}")
    if check["agrees"]:
        return f"Check against {check['what']}: {pair}; they agree within {AGREE:.0%}."
    gap = check["predicted"] / check["measured"] - 1 if check["measured"] > 0 else float("inf")
    return (f"Check against {check['what']}: {pair}; they DISAGREE by {abs(gap):.0%} (more than {AGREE:.0%}), so "
            "this machine's prediction is not to be trusted as it stands.")
