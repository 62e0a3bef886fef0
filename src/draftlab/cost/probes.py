"""Accept lengths for the planner, read from probe results (``draftlab probe --json``, ``plan --save-probe``).

A probe file holds one probe result (a JSON object) or a list of them, one per speculation config.
Each result needs ``config`` (``steps``, ``topk``, ``num_draft_tokens``) and ``mean_accept_length``;
``draftlab generate --json`` output has both and is accepted too. Optional keys the planner checks:
``batch_size`` (the result then applies to that batch size only) and ``target`` (an object with any
of ``model_type``, ``hidden_size``, ``num_layers``, ``vocab_size``, compared with the profile's). A result
whose ``config`` has ``drafter_kind`` "mtp" (``probe --drafter mtp``) is the target's own MTP head's: the
planner prices it with the profile's MTP passes (``profile --drafter mtp``).

An acceptance profile (``probe --profile-out``, ModelOpt's ``speculation_profile.json``) gives accept
lengths too: :func:`profile_accept_lengths` maps it onto the configs to plan
(:func:`draftlab.acceptance.profile.accept_length_for` says which it can give, and how).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftlab import jsonio
from draftlab.cost.model import SpecConfig
from draftlab.errors import DraftlabError
from draftlab.fsutil import write_json_atomic

if TYPE_CHECKING:
    from draftlab.probe.probe import ProbeResult


@dataclass(frozen=True)
class AcceptLength:
    """A mean accept length for one config, and where it came from."""

    config: SpecConfig
    accept_length: float
    source: str  # a probe file (with its index in a list) or "--grid"
    batch_size: int | None = None  # None: valid at every batch size
    target: dict[str, Any] | None = None
    method: str = "eagle3"  # "mtp": drafted by the target's own MTP head (the probe's drafter_kind)


def load_probes(paths: list[str | Path]) -> list[AcceptLength]:
    """Read every probe file; a (config, batch size) given twice is an error."""
    out: list[AcceptLength] = []
    for path in paths:
        out.extend(_load_one(Path(path)))
    seen: dict[tuple[SpecConfig, int | None, str], str] = {}
    for r in out:
        key = (r.config, r.batch_size, r.method)
        if key in seen:
            raise DraftlabError(
                f"config {r.config.label} has two probe results ({seen[key]} and {r.source}); "
                "keep one"
            )
        seen[key] = r.source
    return out


def _load_one(path: Path) -> list[AcceptLength]:
    doc = jsonio.read(path, "no such file; write one with draftlab probe --json")
    items = doc if isinstance(doc, list) else [doc]
    if not items:
        raise DraftlabError("holds an empty list of probe results", path=path)
    return [
        _result(item, f"{path}[{i}]" if isinstance(doc, list) else str(path))
        for i, item in enumerate(items)
    ]


def _result(item: Any, source: str) -> AcceptLength:
    if not isinstance(item, dict) or not isinstance(item.get("config"), dict):
        raise DraftlabError(
            f"{source}: not a probe result (needs \"config\" and \"mean_accept_length\")"
        )
    cfg = item["config"]
    try:
        config = SpecConfig(int(cfg["steps"]), int(cfg["topk"]), int(cfg["num_draft_tokens"]))
    except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        raise DraftlabError(
            f"{source}: config needs integer steps, topk and num_draft_tokens, got {cfg!r}"
        ) from None
    al = item.get("mean_accept_length")
    if not isinstance(al, (int, float)) or isinstance(al, bool) or not 1 <= al <= config.steps + 1:
        raise DraftlabError(
            f"{source}: mean_accept_length {al!r} is not between 1 and steps + 1 = "
            f"{config.steps + 1} for config {config.label}"
        )
    batch = item.get("batch_size")
    if batch is not None and (not isinstance(batch, int) or batch < 1):
        raise DraftlabError(f"{source}: batch_size must be a positive integer, got {batch!r}")
    target = item.get("target")
    return AcceptLength(
        config=config,
        accept_length=float(al),
        source=source,
        batch_size=batch,
        target=target if isinstance(target, dict) else None,
        method="mtp" if cfg.get("drafter_kind") == "mtp" else "eagle3",
    )


def profile_accept_lengths(path: str | Path, configs: Sequence[SpecConfig] | None = None, *,
                           covered: Sequence[SpecConfig] = ()) -> list[AcceptLength]:
    """Accept lengths from the acceptance profile at ``path`` for ``configs`` (None: the config it was
    measured on), skipping those in ``covered`` (given by probe files); DraftlabError for one it cannot give."""
    from draftlab.acceptance.profile import accept_length_for, read_profile

    profile = read_profile(path)
    if configs is None:
        own = profile.speculation_config
        k = profile.num_speculative_tokens
        configs = [SpecConfig(own["steps"], own["topk"], own["num_draft_tokens"]) if own else SpecConfig(k, 1, k + 1)]
    out = []
    for config in dict.fromkeys(c for c in configs if c not in covered):
        try:
            al, how = accept_length_for(profile, config.steps, config.topk, config.num_draft_tokens)
        except DraftlabError as exc:
            raise DraftlabError(str(exc), path=path) from None
        out.append(AcceptLength(config, al, str(path) if how == "measured" else f"{path} ({how})"))
    return out


def save_probes(results: Sequence[ProbeResult], path: str | Path) -> Path:
    """Write probe results as one JSON list, atomically: the file :func:`load_probes` reads back."""
    write_json_atomic(path, [asdict(r) for r in results])
    return Path(path)
