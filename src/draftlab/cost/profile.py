"""PROFILE.json: measured costs on one machine, and the cost curves the planner reads from them.

``draftlab profile`` writes it; ``draftlab plan --costs`` reads it. Schema (``format``
``draftlab-profile/1``; times in milliseconds; every measured point is an object with
``batch_size``, ``tokens``, ``median_ms``, ``p10_ms``, ``p90_ms``, ``min_ms``, ``max_ms``,
``repeats``)::

    {"format": "draftlab-profile/1",
     "model": {"target": str|null, "drafter": str|null, "model_type": str|null,
               "hidden_size": int|null, "num_layers": int|null, "vocab_size": int|null,
               "dtype": str|null},
     "context_tokens": int,          # KV-cache length the passes ran after
     "timer": "perf_counter_synchronized"|"perf_counter", "warmup": int, "repeats": int,
     "environment": {...},           # hardware and software versions
     "verify": [point...],           # target forward, tokens = tokens per sequence (1 = decode)
     "draft_step": [point...],       # one drafter pass, tokens = rows per sequence (topk)
     "draft_extend": [point...],     # drafter over accepted tokens, tokens per sequence
     "mtp_draft_step": [point...],   # the target's own MTP head: one draft pass (rows per sequence) and its
     "mtp_draft_extend": [point...], # extend over the accepted tokens (absent or [] unless profiled)
     "deployment": null | {...},     # the engine fields of what was profiled (engine, engine_version,
                                     # captured_layers, ...: Deployment.describe(), or MtpServing.describe())
     "mtp": null | {...},            # the MTP head profiled: its engine fields and layer (drafter_kind, mtp_layer)
     "allreduce": null | {"tp": int, "backend": str, "dtype": str, "hidden_size": int,
                          "calls_per_forward": int,   # 2 per target layer (attention, MLP)
                          "points": [point...]},      # one all-reduce of batch x tokens x hidden
     "overhead_ms": float,           # a fixed per-cycle overhead to assume on top (user-given)
     "overhead": [{"batch_size": int, "decode_ms": float, "cycle_ms": float, "draft_step_ms": float,
                   "tree_ms": float}],
                                     # the decoder's own work, measured (draftlab.cost.overhead)
     "mtp_overhead": [{...}],        # the same with the MTP head drafting (batch 1, the head's only decoder;
                                     # absent or [] unless profiled; elsewhere the head takes "overhead")
     "served": [{"batch_size": int, "step_ms": float, "batch_ms": float, "request_tokens": int}]}
                                     # draftlab serve's plain decoding, measured through it
                                     # (draftlab.cost.served; absent or [] unless plan --served)

Costs between measured token counts are interpolated linearly; batch sizes must be measured.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from draftlab import jsonio
from draftlab.cost.measurement import Measurement
from draftlab.cost.model import CycleBreakdown, SpecConfig, cycle_breakdown
from draftlab.cost.overhead import Overhead
from draftlab.cost.served import ServedCost
from draftlab.errors import DraftlabError
from draftlab.fsutil import write_json_atomic

FORMAT = "draftlab-profile/1"
SECTIONS = ("verify", "draft_step", "draft_extend", "mtp_draft_step", "mtp_draft_extend")
_POINT_TIMES = ("median_ms", "p10_ms", "p90_ms", "min_ms", "max_ms")


@dataclass(frozen=True)
class ModelInfo:
    """What was profiled. Shape fields decide the costs, so the planner compares them."""

    target: str | None = None
    drafter: str | None = None
    model_type: str | None = None
    hidden_size: int | None = None
    num_layers: int | None = None
    vocab_size: int | None = None
    dtype: str | None = None

    SHAPE_FIELDS = ("model_type", "hidden_size", "num_layers", "vocab_size")


@dataclass(frozen=True)
class AllReduceCosts:
    """Tensor-parallel all-reduce latency of one call, per verify message size."""

    tp: int
    backend: str
    dtype: str
    hidden_size: int
    calls_per_forward: int
    points: list[Measurement]


@dataclass(frozen=True)
class Profile:
    """Measured costs of one target (and drafter) on one machine."""

    model: ModelInfo
    verify: list[Measurement]
    draft_step: list[Measurement] = field(default_factory=list)
    draft_extend: list[Measurement] = field(default_factory=list)
    allreduce: AllReduceCosts | None = None
    overhead_ms: float = 0.0
    overhead: list[Overhead] = field(default_factory=list)
    mtp_overhead: list[Overhead] = field(default_factory=list)  # the MTP head's decoder's own work
    served: list[ServedCost] = field(default_factory=list)
    mtp_draft_step: list[Measurement] = field(default_factory=list)  # the target's own MTP head's passes
    mtp_draft_extend: list[Measurement] = field(default_factory=list)
    deployment: dict[str, Any] | None = None  # the engine fields of the drafter profiled
    mtp: dict[str, Any] | None = None  # the MTP head profiled (engine fields, layer), with its passes
    context_tokens: int = 0
    timer: str = "perf_counter"
    warmup: int = 0
    repeats: int = 0
    environment: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({m.batch_size for m in self.verify})


class CostCurve:
    """Milliseconds of one kind of pass as a function of (batch size, tokens per sequence). A pass over
    more tokens costs at least what a smaller one does, so each batch size's medians are read through
    their closest non-decreasing fit (:func:`nondecreasing`): a dip or a spike is noise, pooled with its
    neighbours rather than carried to every larger pass (:mod:`draftlab.cost.consistency` calls a large
    dip a contradiction), and no cycle comes out cheaper than the decode step inside it."""

    def __init__(self, name: str, points: list[Measurement], *, hint: str) -> None:
        self.name = name
        self.hint = hint
        by_batch: dict[int, list[Measurement]] = {}
        for m in sorted(points, key=lambda m: (m.batch_size, m.tokens)):
            by_batch.setdefault(m.batch_size, []).append(m)
        self._by_batch = {b: ([m.tokens for m in ms], nondecreasing([m.median_ms for m in ms]))
                          for b, ms in by_batch.items()}

    def at(self, batch_size: int, tokens: float) -> float:
        """The cost at ``tokens`` per sequence, interpolated between measured token counts."""
        if batch_size not in self._by_batch:
            measured = ", ".join(map(str, sorted(self._by_batch))) or "none"
            raise DraftlabError(
                f"no {self.name} measurement at batch size {batch_size} (measured: {measured}); "
                f"{self.hint}"
            )
        xs, ys = self._by_batch[batch_size]
        if not xs[0] <= tokens <= xs[-1]:
            raise DraftlabError(
                f"{self.name} at {tokens:g} tokens per sequence, batch {batch_size}, is outside "
                f"the measured range {xs[0]}..{xs[-1]}; {self.hint}"
            )
        i = bisect.bisect_left(xs, tokens)
        if xs[i] == tokens:
            return ys[i]
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)


def nondecreasing(values: list[float]) -> list[float]:
    """The least-squares non-decreasing fit to ``values`` (pool adjacent violators): each run that falls
    is replaced by its mean, merging backwards until the sequence no longer falls."""
    blocks: list[tuple[float, int]] = []  # (mean, length)
    for v in values:
        mean, n = v, 1
        while blocks and blocks[-1][0] > mean:
            prev, k = blocks.pop()
            mean, n = (prev * k + mean * n) / (k + n), k + n
        blocks.append((mean, n))
    return [mean for mean, n in blocks for _ in range(n)]


@dataclass(frozen=True)
class CostTable:
    """The cost curves of a profile, ready for :func:`draftlab.cost.model.cycle_breakdown`."""

    verify: CostCurve
    draft_step: CostCurve
    draft_extend: CostCurve
    allreduce: CostCurve | None
    allreduce_calls: int
    overhead_ms: float
    overheads: dict[int, Overhead]
    served: dict[int, ServedCost] = field(default_factory=dict)

    @classmethod
    def of(cls, profile: Profile, *, mtp: bool = False) -> CostTable:
        """The curves of ``profile``; with ``mtp`` the drafter's are the target's own MTP head's, and so is the
        decoder's measured overhead where its cycles were timed (elsewhere the drafter's decoder's stands in)."""
        hint = "re-run draftlab profile with the missing size"
        drafter_hint = f"run draftlab profile with --drafter {'mtp ' if mtp else ''}and the sizes needed"
        ar = profile.allreduce
        step, extend = (profile.mtp_draft_step, profile.mtp_draft_extend) if mtp else \
            (profile.draft_step, profile.draft_extend)
        which = "MTP " if mtp else ""
        return cls(
            verify=CostCurve("verify", profile.verify, hint=hint),
            draft_step=CostCurve(f"{which}draft step", step, hint=drafter_hint),
            draft_extend=CostCurve(f"{which}draft-extend", extend, hint=drafter_hint),
            allreduce=None if ar is None else CostCurve("all-reduce", ar.points, hint=hint),
            allreduce_calls=0 if ar is None else ar.calls_per_forward,
            overhead_ms=profile.overhead_ms,
            overheads={o.batch_size: o for o in [*profile.overhead, *(profile.mtp_overhead if mtp else [])]},
            served={c.batch_size: c for c in profile.served},
        )

    def decode_pass_ms(self, batch_size: int) -> float:
        """One plain decode pass: a one-token target forward and its all-reduces."""
        return self.verify.at(batch_size, 1) + self.allreduce_ms(batch_size, 1)

    def decode_ms(self, batch_size: int) -> float:
        """One plain decode step: the pass plus the decoder's measured overhead (0 if unmeasured)."""
        own = self.overheads.get(batch_size)
        return self.decode_pass_ms(batch_size) + (own.decode_ms if own else 0.0)

    def cycle(self, batch_size: int, config: SpecConfig, accept_length: float) -> CycleBreakdown:
        """One cycle of ``config``: its passes, plus the assumed and the measured overheads."""
        own = self.overheads.get(batch_size)
        return cycle_breakdown(
            config=config,
            draft_extend_ms=self.draft_extend.at(batch_size, accept_length),
            draft_step_ms=self.draft_step.at(batch_size, config.topk) if config.draft_passes else 0.0,
            verify_ms=self.verify.at(batch_size, config.num_draft_tokens),
            allreduce_ms=self.allreduce_ms(batch_size, config.num_draft_tokens),
            overhead_ms=self.overhead_ms + (own.of(config) if own else 0.0),
        )

    def passes_ms(self, batch_size: int, config: SpecConfig, accept_length: float) -> float:
        """A cycle's passes alone (what :func:`draftlab.cost.overhead.fit_overhead` subtracts)."""
        c = self.cycle(batch_size, config, accept_length)
        return c.total_ms - c.overhead_ms

    def allreduce_ms(self, batch_size: int, tokens: float) -> float:
        """Communication of one target forward over ``tokens`` per sequence (0 if unmeasured)."""
        if self.allreduce is None:
            return 0.0
        return self.allreduce_calls * self.allreduce.at(batch_size, tokens)


def save_profile(profile: Profile, path: str | Path) -> Path:
    """Write PROFILE.json atomically."""
    write_json_atomic(path, {"format": FORMAT, **asdict(profile)})
    return Path(path)


def load_profile(path: str | Path) -> Profile:
    """Read and validate PROFILE.json."""
    path = Path(path)
    return profile_from_dict(jsonio.read(path, "no such file; write one with draftlab profile"), source=path)


def profile_from_dict(doc: Any, *, source: str | Path = "profile") -> Profile:
    """Validate a parsed profile document: known format, positive times, no duplicate points."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DraftlabError(
            f"not a draftlab profile (expected \"format\": \"{FORMAT}\"); "
            "write one with draftlab profile", path=source,
        )
    sections = {name: _points(doc, name, doc.get(name, []), source) for name in SECTIONS}
    allreduce = None
    if doc.get("allreduce") is not None:
        ar = doc["allreduce"]
        if not isinstance(ar, dict):
            raise DraftlabError("allreduce must be an object or null", path=source)
        allreduce = AllReduceCosts(
            tp=_int(ar, "tp", "allreduce.tp", source, minimum=2),
            backend=str(ar.get("backend", "")),
            dtype=str(ar.get("dtype", "")),
            hidden_size=_int(ar, "hidden_size", "allreduce.hidden_size", source, minimum=1),
            calls_per_forward=_int(
                ar, "calls_per_forward", "allreduce.calls_per_forward", source, minimum=1
            ),
            points=_points(doc, "allreduce.points", ar.get("points"), source),
        )
    overhead = doc.get("overhead_ms", 0.0)
    if not isinstance(overhead, (int, float)) or isinstance(overhead, bool) or not 0 <= overhead < math.inf:
        raise DraftlabError(f"overhead_ms must be a number >= 0, got {overhead!r}", path=source)
    model = doc.get("model") or {}
    if not isinstance(model, dict):
        raise DraftlabError("model must be an object", path=source)
    known = {f: model.get(f) for f in ModelInfo.__dataclass_fields__}
    return Profile(
        model=ModelInfo(**known),
        verify=sections["verify"],
        draft_step=sections["draft_step"],
        draft_extend=sections["draft_extend"],
        mtp_draft_step=sections["mtp_draft_step"],
        mtp_draft_extend=sections["mtp_draft_extend"],
        deployment=_object(doc["deployment"], "deployment", source) if doc.get("deployment") is not None else None,
        mtp=_object(doc["mtp"], "mtp", source) if doc.get("mtp") is not None else None,
        allreduce=allreduce,
        overhead_ms=float(overhead),
        overhead=_overheads(doc.get("overhead") or [], source),
        mtp_overhead=_overheads(doc.get("mtp_overhead") or [], source),
        served=_served(doc.get("served") or [], source),
        context_tokens=_int({"v": doc.get("context_tokens", 0)}, "v", "context_tokens", source, minimum=0),
        timer=str(doc.get("timer", "")),
        warmup=_int({"v": doc.get("warmup", 0)}, "v", "warmup", source, minimum=0),
        repeats=_int({"v": doc.get("repeats", 0)}, "v", "repeats", source, minimum=0),
        environment=_object(doc.get("environment") or {}, "environment", source),
    )


def _points(doc: dict, name: str, raw: Any, source: str | Path) -> list[Measurement]:
    if not isinstance(raw, list):
        raise DraftlabError(f"{name} must be a list of measured points", path=source)
    out: list[Measurement] = []
    seen: set[tuple[int, int]] = set()
    for i, p in enumerate(raw):
        where = f"{name}[{i}]"
        if not isinstance(p, dict):
            raise DraftlabError(f"{where} must be an object", path=source)
        b = _int(p, "batch_size", where + ".batch_size", source, minimum=1)
        t = _int(p, "tokens", where + ".tokens", source, minimum=1)
        if (b, t) in seen:
            raise DraftlabError(f"{where} repeats batch {b}, tokens {t}", path=source)
        seen.add((b, t))
        times = {}
        for key in _POINT_TIMES:
            value = p.get(key, p.get("median_ms"))
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < math.inf:
                raise DraftlabError(
                    f"{where}.{key} is {value!r}; times must be positive numbers "
                    "(re-run draftlab profile)", path=source,
                )
            times[key] = float(value)
        repeats = _int({"v": p.get("repeats", 1)}, "v", where + ".repeats", source, minimum=1)
        out.append(Measurement(b, t, repeats=repeats, **times))
    return out


def _overheads(raw: Any, source: str | Path) -> list[Overhead]:
    out = []
    for where, o in _rows(raw, "overhead", "a list of measured overheads", source):
        keys = ("decode_ms", "cycle_ms", "draft_step_ms", "tree_ms" if "tree_ms" in o else None)  # tree_ms: newer
        times = {k: _ms(o, k, where, source, non_negative=True) for k in keys if k is not None}
        out.append(Overhead(_int(o, "batch_size", where + ".batch_size", source, minimum=1), **times))
    return out


def _served(raw: Any, source: str | Path) -> list[ServedCost]:
    out = []
    for where, o in _rows(raw, "served", "a list of served costs", source):
        out.append(ServedCost(_int(o, "batch_size", where + ".batch_size", source, minimum=1),
                              request_tokens=_int(o, "request_tokens", where + ".request_tokens", source, minimum=2),
                              step_ms=_ms(o, "step_ms", where, source, non_negative=False),
                              batch_ms=_ms(o, "batch_ms", where, source, non_negative=False)))
    return out


def _rows(raw: Any, name: str, what: str, source: str | Path) -> list[tuple[str, dict]]:
    """``raw`` as a list of objects, each with the path an error names (``name[i]``)."""
    if not isinstance(raw, list):
        raise DraftlabError(f"{name} must be {what}", path=source)
    for i, o in enumerate(raw):
        if not isinstance(o, dict):
            raise DraftlabError(f"{name}[{i}] must be an object", path=source)
    return [(f"{name}[{i}]", o) for i, o in enumerate(raw)]


def _ms(obj: dict, key: str, where: str, source: str | Path, *, non_negative: bool) -> float:
    value = obj.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
            or (non_negative and value < 0):
        raise DraftlabError(f"{where}.{key} is {value!r}; it must be a number" + (" >= 0" if non_negative else ""),
                            path=source)
    return float(value)


def _object(value: Any, where: str, source: str | Path) -> dict:
    if not isinstance(value, dict):
        raise DraftlabError(f"{where} must be an object, got {value!r}", path=source)
    return dict(value)


def _int(obj: dict, key: str, where: str, source: str | Path, *, minimum: int) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise DraftlabError(f"{where} must be an integer >= {minimum}, got {value!r}", path=source)
    return value
