"""The check every launch runs first: ``draftlab check`` with the launched release's rules, before a server
starts (``launch``, ``sweep``)."""

from __future__ import annotations

from pathlib import Path

from draftlab.compat.check import check_pair
from draftlab.compat.mtp import check_mtp
from draftlab.engines.launch import (
    REFERENCE,
    REFERENCE_CONVENTION,
    LaunchRequest,
    trained_window,
)
from draftlab.engines.mtp import MTP
from draftlab.engines.window import SGLANG_WINDOW_FLAG
from draftlab.errors import DraftlabError

CONTEXT_TOO_SHORT = "context-too-short"  # the compat finding that calls for the SGLang override


def check_before_launch(request: LaunchRequest, engine_version: str | None = None) -> tuple[bool, list[str]]:
    """Run ``draftlab check`` on a local drafter/target pair before launching it, with the rules of
    ``engine_version`` (default: the newest release draftlab knows).

    Returns (context_too_short, notes). Error findings refuse the launch (the engine would fail or
    silently accept almost nothing); a too-short drafter context is the one error the engine can be
    told to live with, so it becomes the SGLang override instead. Hub ids are not checked (no
    network here): the notes say so.
    """
    if request.drafter is None:
        return False, []
    if request.drafter == MTP and request.engine != REFERENCE:
        return False, _check_mtp_before_launch(request, engine_version)
    if not (Path(request.target).is_dir() and Path(request.drafter).is_dir()):
        return False, ["check skipped: target or drafter is not a local folder (hub ids are not fetched)"]
    convention = REFERENCE_CONVENTION if request.engine == REFERENCE else request.engine
    result = check_pair(request.drafter, request.target, convention, engine_version, _served_window(request))
    errors = [f for f in result.findings if f.severity == "error" and f.code != CONTEXT_TOO_SHORT]
    if errors:
        unfixable = [f for f in errors if not f.fixable]
        first = (unfixable or errors)[0]
        todo = (f"{first.fix} (draftlab check --fix cannot fix {first.code})" if unfixable
                else "run draftlab check --fix OUT and launch OUT")
        which = "first" if first is errors[0] else "among them"
        raise DraftlabError(
            f"check found {len(errors)} error(s) for {request.engine} {result.engine_version}, {which} {first.code} "
            f"({first.field}): {first.message}; {todo}, or pass --skip-check"
        )
    too_short = any(f.code == CONTEXT_TOO_SHORT for f in result.findings)
    return too_short, [f"check ({result.engine} {result.engine_version} rules): {len(result.findings)} finding(s), "
                       "no errors"]


def _check_mtp_before_launch(request: LaunchRequest, engine_version: str | None) -> list[str]:
    """``check mtp`` on a local target before launching its own MTP layers; an error refuses the launch."""
    if not Path(request.target).is_dir():
        return ["check skipped: the target is not a local folder (hub ids are not fetched)"]
    result = check_mtp(request.target, request.engine, engine_version)
    errors = [f for f in result.findings if f.severity == "error"]
    if errors:
        first = errors[0]
        raise DraftlabError(f"check mtp found {len(errors)} error(s) for {request.engine} {result.engine_version}, "
                            f"first {first.code} ({first.field}): {first.message}; {first.fix}, or pass --skip-check")
    return [(f"check mtp ({result.engine} {result.engine_version} rules): {len(result.findings)} finding(s), "
             "no errors")]


def _served_window(request: LaunchRequest) -> int | None:
    """The --speculative-draft-window-size an SGLang launch passes: the user's, else the one launch adds for a drafter
    trained with a window (engines/launch.py); None for other engines."""
    if request.engine != "sglang" or request.drafter is None:
        return None
    args = list(request.extra_args)
    if SGLANG_WINDOW_FLAG in args[:-1]:
        given = args[args.index(SGLANG_WINDOW_FLAG) + 1]
        return int(given) if given.isdigit() and int(given) > 0 else None
    return trained_window(request.drafter)
