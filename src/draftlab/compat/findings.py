"""What ``check`` reports: findings with stable codes, and the result of checking one pair."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One problem a drafter/target pair has in an engine.

    ``field`` names the config key (dotted for nested keys) or the tensor concerned; ``fix`` says
    what to change; ``fixable`` is true when ``check --fix`` changes it by itself.
    """

    code: str
    severity: str  # "error" | "warning" | "info"
    field: str
    message: str
    fix: str
    fixable: bool = False


@dataclass
class CheckResult:
    """Every finding for one pair in one engine; ``ok`` when none is an error."""

    ok: bool
    engine: str
    engine_version: str  # the release whose rules applied
    drafter: Path
    target: Path
    aux_layers: list[int]  # canonical ids of the target layers the engine will capture
    aux_source: str  # the config field they come from, or "default"
    findings: list[Finding] = field(default_factory=list)
    # what the release runs for the pair (engines/deployment.py's describe(): captured_layers, aux_rule, runner,
    # draft_windows, the version asked), as every computing command's JSON names it
    deployment: dict[str, Any] = field(default_factory=dict)

    @property
    def fixable(self) -> list[Finding]:
        return [f for f in self.findings if f.fixable]

    def count(self, severity: str) -> int:
        return sum(f.severity == severity for f in self.findings)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; stable within a severity."""
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
