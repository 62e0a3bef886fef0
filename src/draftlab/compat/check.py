"""``check``: every problem a drafter/target pair will have in one engine."""

from __future__ import annotations

from pathlib import Path

from draftlab.checkpoint import drafter_config, is_drafter, open_checkpoint, target_config
from draftlab.compat import (
    architectures,
    aux,
    config_types,
    context,
    loading,
    mtp,
    numbers,
    shapes,
    variants,
    vocab,
    window,
)
from draftlab.compat.findings import CheckResult, sort_findings
from draftlab.compat.pair import Pair
from draftlab.engines.releases import release
from draftlab.errors import DraftlabError

# Each rule is a function Pair -> findings; grouped by concern.
RULES = (shapes.RULES + vocab.RULES + aux.RULES + context.RULES + loading.RULES + variants.RULES
         + architectures.RULES + numbers.RULES + config_types.RULES + window.RULES + mtp.RULES)


def open_pair(drafter: str | Path, target: str | Path, engine: str, version: str | None = None,
              draft_window: int | None = None) -> Pair:
    """Open both checkpoints (headers and configs only) and check each is what it claims to be;
    ``draft_window``: SGLang's --speculative-draft-window-size the pair is served with."""
    asked, version = version, release(engine, version).version  # refuse an unknown one before touching files
    d_ckpt, t_ckpt = open_checkpoint(drafter), open_checkpoint(target)
    if not is_drafter(d_ckpt):
        raise DraftlabError("is not an EAGLE-3 drafter (no Eagle3 architecture, speculators config or fc + "
                            "midlayer weights)", path=drafter)
    if is_drafter(t_ckpt):
        raise DraftlabError("is an EAGLE-3 drafter; --target must be the target model", path=target)
    return Pair(engine, d_ckpt, drafter_config(d_ckpt), t_ckpt, target_config(t_ckpt), version, draft_window, asked)


def check_pair(drafter: str | Path, target: str | Path, engine: str = "sglang",
               engine_version: str | None = None, draft_window: int | None = None) -> CheckResult:
    """Check ``drafter`` against ``target`` for ``engine`` ("sglang" or "vllm") at ``engine_version``
    (default: the newest release draftlab knows), served with SGLang's ``draft_window`` if given."""
    pair = open_pair(drafter, target, engine, engine_version, draft_window)
    return run_rules(pair, Path(drafter), Path(target))


def run_rules(pair: Pair, drafter: Path, target: Path) -> CheckResult:
    """Every rule's findings for an opened pair."""
    findings = sort_findings([f for rule in RULES for f in rule(pair)])
    return CheckResult(
        ok=not any(f.severity == "error" for f in findings),
        engine=pair.engine,
        engine_version=pair.release.version,
        drafter=drafter,
        target=target,
        aux_layers=pair.captured.layers,
        aux_source=pair.captured.source,
        findings=findings,
        deployment=pair.deployment.describe(),
    )
