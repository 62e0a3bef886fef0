"""Refuse a pair ``check`` rejects before any command loads its weights.

Every command that runs a drafter (probe, generate, drift, capture, train, serve, profile, assess) calls
:func:`refuse_unloadable` first: it opens both checkpoints from headers and configs only, runs ``check``'s
rules for the resolved deployment, and raises on the first error finding, naming the file, what is wrong
and what to do. So a pair that the runtime or the engine would fail on, or serve as another function, never
costs a weight load, and ``check``'s "no errors" is exactly what the commands accept.
"""

from __future__ import annotations

from pathlib import Path

from draftlab.compat.check import open_pair, run_rules
from draftlab.compat.findings import Finding
from draftlab.engines.deployment import Deployment
from draftlab.errors import DraftlabError

# The one error the engines can be told to live with (SGLang's context override; vLLM serves up to the target's
# length and the drafter's acceptance past its own is what a probe measures): not a refusal here either.
TOLERATED = frozenset({"context-too-short"})
# Refused whatever its severity: draftlab computes no parallel drafting (P-EAGLE), even where a release serves it.
NOT_COMPUTED = frozenset({"parallel-drafting"})


def blocking_findings(drafter: Path, target: Path, deployment: Deployment) -> list[Finding]:
    """``check``'s error findings for this pair under ``deployment`` (the tolerated ones left out), and the
    findings of what draftlab does not compute."""
    pair = open_pair(drafter, target, deployment.engine, deployment.version, deployment.draft_window)
    result = run_rules(pair, Path(drafter), Path(target))
    return [f for f in result.findings
            if f.code in NOT_COMPUTED or (f.severity == "error" and f.code not in TOLERATED)]


def refuse_unloadable(drafter: Path, target: Path, deployment: Deployment) -> None:
    """Raise :class:`DraftlabError` (one line) when ``check`` finds an error in this pair for ``deployment``, or the
    drafter drafts in parallel (P-EAGLE)."""
    found = blocking_findings(drafter, target, deployment)
    if not found:
        return
    first = next((f for f in found if f.code in NOT_COMPUTED), found[0])
    if first.code in NOT_COMPUTED:
        raise DraftlabError(f"{first.message.split(':')[0]}: draftlab computes no parallel drafting, so it cannot run "
                            "this drafter (draftlab check names what each release does with it)", path=drafter)
    more = f" (and {len(found) - 1} more error(s))" if len(found) > 1 else ""
    todo = "run draftlab check --fix OUT and use OUT" if first.fixable else first.fix
    raise DraftlabError(
        f"{deployment.release.name} would not run this drafter as trained: {first.code} ({first.field}): "
        f"{first.message}{more}; {todo} (draftlab check --engine {deployment.engine} --engine-version "
        f"{deployment.version} lists every finding)", path=drafter)
