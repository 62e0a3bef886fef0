"""Refuse a pair ``check`` rejects before any command loads its weights.

Every command that runs a drafter (probe, generate, drift, capture, train, serve, profile, assess) calls
:func:`refuse_unloadable` first: it opens both checkpoints from headers and configs only, runs ``check``'s
rules for the resolved deployment, and raises on the first error finding, naming the file, what is wrong
and what to do; a P-EAGLE drafter is refused too (draftlab computes no parallel drafting). So a pair that the runtime or the engine would fail on, or serve as another function, never
costs a weight load, and ``check``'s "no errors" is exactly what the commands accept.
"""

from __future__ import annotations

from pathlib import Path

from draftlab.checkpoint.variants import parallel_drafting
from draftlab.compat.check import open_pair, run_rules
from draftlab.compat.findings import CheckResult, Finding
from draftlab.engines.deployment import Deployment
from draftlab.errors import DraftlabError

# The one error the engines can be told to live with (SGLang's context override; vLLM serves up to the target's
# length and the drafter's acceptance past its own is what a probe measures): not a refusal here either.
TOLERATED = frozenset({"context-too-short"})


def blocking_findings(result: CheckResult) -> list[Finding]:
    """``check``'s error findings, the tolerated ones left out."""
    return [f for f in result.findings if f.severity == "error" and f.code not in TOLERATED]


def refuse_unloadable(drafter: Path, target: Path, deployment: Deployment) -> None:
    """Raise :class:`DraftlabError` (one line) when the drafter drafts in parallel (P-EAGLE, which draftlab does not
    compute whatever a release does with it) or ``check`` finds an error in this pair for ``deployment``."""
    pair = open_pair(drafter, target, deployment.engine, deployment.version, deployment.draft_window)
    peagle = parallel_drafting(pair.drafter_ckpt.config, pair.drafter_ckpt.tensors)
    if peagle is not None:
        raise DraftlabError(f"a P-EAGLE drafter ({peagle}): draftlab computes no parallel drafting, so it cannot run "
                            "this drafter (draftlab check names what each release does with it)", path=drafter)
    found = blocking_findings(run_rules(pair, Path(drafter), Path(target)))
    if not found:
        return
    first = found[0]
    more = f" (and {len(found) - 1} more error(s))" if len(found) > 1 else ""
    todo = "run draftlab check --fix OUT and use OUT" if first.fixable else first.fix
    raise DraftlabError(
        f"{deployment.release.name} would not run this drafter as trained: {first.code} ({first.field}): "
        f"{first.message}{more}; {todo} (draftlab check --engine {deployment.engine} --engine-version "
        f"{deployment.version} lists every finding)", path=drafter)
