"""Solve the cost model from numbers read off a serving engine, and answer what-ifs.

A user who ran an engine with and without speculation knows the baseline tokens per second, the
speculative tokens per second and the accept length. Those fix the decode step and the cycle time,
hence the break-even accept length; a what-if then changes one of them (a cycle time, an accept
length, a decode step, the all-reduce scaled by a factor) and predicts the throughput.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from draftlab.cost import model
from draftlab.errors import DraftlabError

WHAT_IF_KEYS = ("accept_length", "cycle_ms", "decode_ms", "allreduce_scale")


@dataclass(frozen=True)
class Scenario:
    """One set of assumptions and the throughput the model predicts under them."""

    assumptions: dict[str, float]
    accept_length: float
    cycle_ms: float
    decode_ms: float
    tokens_per_second: float
    baseline_tokens_per_second: float
    speedup: float
    break_even_accept_length: float


@dataclass(frozen=True)
class EngineEstimate:
    """The measured situation (solved) and the what-if scenarios asked for."""

    batch_size: int
    decode_ms: float
    cycle_ms: float
    break_even_accept_length: float
    baseline_tokens_per_second: float
    accept_length: float | None
    tokens_per_second: float | None  # speculative, measured or implied by --cycle-ms
    speedup: float | None
    allreduce_ms: float | None  # per cycle
    allreduce_share: float | None  # of the cycle
    what_ifs: list[Scenario] = field(default_factory=list)
    verdict: str = ""


def parse_what_if(text: str) -> dict[str, float]:
    """Read ``"accept_length=3.2"`` or ``"allreduce_scale=0.5,accept_length=2"``."""
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in WHAT_IF_KEYS:
            raise DraftlabError(
                f"--what-if {text!r}: expected KEY=VALUE[,KEY=VALUE] with KEY one of "
                f"{', '.join(WHAT_IF_KEYS)}"
            )
        try:
            out[key] = float(value)
        except ValueError:
            raise DraftlabError(f"--what-if {text!r}: {value.strip()!r} is not a number") from None
        if out[key] < 0 or (out[key] == 0 and key != "allreduce_scale"):
            raise DraftlabError(f"--what-if {text!r}: {key} must be positive")
    if "cycle_ms" in out and "allreduce_scale" in out:
        raise DraftlabError(
            f"--what-if {text!r}: give either cycle_ms or allreduce_scale, not both"
        )
    return out


def estimate_from_engine(
    *,
    batch_size: int = 1,
    baseline_tps: float | None = None,
    decode_ms: float | None = None,
    spec_tps: float | None = None,
    cycle_ms: float | None = None,
    accept_length: float | None = None,
    allreduce_ms: float | None = None,
    allreduce_share: float | None = None,
    what_ifs: list[dict[str, float]] | None = None,
) -> EngineEstimate:
    """Solve for the decode step, cycle and break-even accept length; evaluate ``what_ifs``.

    Give the baseline as ``baseline_tps`` or ``decode_ms``, the speculative run as ``spec_tps`` plus
    ``accept_length`` or as ``cycle_ms``, and optionally the all-reduce time of a cycle as
    ``allreduce_ms`` or as a share of the cycle. Throughputs are totals over the batch.
    """
    if batch_size < 1:
        raise DraftlabError(f"--batch-size must be >= 1, got {batch_size}")
    if (baseline_tps is None) == (decode_ms is None):
        raise DraftlabError("give the baseline as exactly one of --baseline-tps or --decode-ms")
    if (spec_tps is None) == (cycle_ms is None):
        raise DraftlabError("give the speculative run as exactly one of --spec-tps or --cycle-ms")
    if spec_tps is not None and accept_length is None:
        raise DraftlabError("--spec-tps needs --accept-length to infer the cycle time")
    if accept_length is not None and accept_length < 1:
        raise DraftlabError(
            f"--accept-length {accept_length}: an accept length counts the bonus token, so it "
            "is at least 1"
        )
    if allreduce_ms is not None and allreduce_share is not None:
        raise DraftlabError("give at most one of --allreduce-ms and --allreduce-share")

    if decode_ms is None:
        decode_ms = model.decode_ms_from_throughput(batch_size, baseline_tps)  # type: ignore[arg-type]
    if cycle_ms is None:
        cycle_ms = model.cycle_ms_from_throughput(batch_size, accept_length, spec_tps)  # type: ignore[arg-type]
    for name, value in (("--decode-ms", decode_ms), ("--cycle-ms", cycle_ms)):
        if not value > 0:
            raise DraftlabError(f"{name} must be positive, got {value}")
    if allreduce_share is not None:
        if not 0 <= allreduce_share < 1:
            raise DraftlabError(f"--allreduce-share must be in [0, 1), got {allreduce_share}")
        allreduce_ms = allreduce_share * cycle_ms
    elif allreduce_ms is not None:
        if not 0 <= allreduce_ms < cycle_ms:
            raise DraftlabError(
                f"--allreduce-ms {allreduce_ms} must be >= 0 and below the cycle ({cycle_ms:.1f} ms)"
            )
        allreduce_share = allreduce_ms / cycle_ms

    base_tps = model.baseline_tokens_per_second(batch_size, decode_ms)
    spec = (
        None if accept_length is None
        else model.tokens_per_second(batch_size, accept_length, cycle_ms)
    )
    estimate = EngineEstimate(
        batch_size=batch_size,
        decode_ms=decode_ms,
        cycle_ms=cycle_ms,
        break_even_accept_length=model.break_even_accept_length(cycle_ms, decode_ms),
        baseline_tokens_per_second=base_tps,
        accept_length=accept_length,
        tokens_per_second=spec,
        speedup=None if spec is None else spec / base_tps,
        allreduce_ms=allreduce_ms,
        allreduce_share=allreduce_share,
    )
    scenarios = [_scenario(estimate, w) for w in what_ifs or []]
    return replace(estimate, what_ifs=scenarios, verdict=_verdict(estimate, scenarios))


def _scenario(est: EngineEstimate, assumptions: dict[str, float]) -> Scenario:
    accept = assumptions.get("accept_length", est.accept_length)
    if accept is None:
        raise DraftlabError(
            "a what-if needs an accept length: give --accept-length or accept_length=... in it"
        )
    cycle = assumptions.get("cycle_ms", est.cycle_ms)
    if "allreduce_scale" in assumptions:
        if est.allreduce_ms is None:
            raise DraftlabError(
                "what-if allreduce_scale needs the measured all-reduce: give --allreduce-ms or "
                "--allreduce-share"
            )
        cycle -= (1.0 - assumptions["allreduce_scale"]) * est.allreduce_ms
    decode = assumptions.get("decode_ms", est.decode_ms)
    tps = model.tokens_per_second(est.batch_size, accept, cycle)
    base = model.baseline_tokens_per_second(est.batch_size, decode)
    return Scenario(
        assumptions=dict(assumptions),
        accept_length=accept,
        cycle_ms=cycle,
        decode_ms=decode,
        tokens_per_second=tps,
        baseline_tokens_per_second=base,
        speedup=tps / base,
        break_even_accept_length=model.break_even_accept_length(cycle, decode),
    )


def _verdict(est: EngineEstimate, scenarios: list[Scenario]) -> str:
    be = est.break_even_accept_length
    lines = [
        f"A cycle costs {est.cycle_ms:.1f} ms = {be:.2f} decode steps of {est.decode_ms:.1f} ms, "
        f"so a drafter needs an accept length above {be:.2f} just to break even."
    ]
    if est.accept_length is not None and est.tokens_per_second is not None:
        wins = est.accept_length > be
        lines.insert(0, (
            f"Speculation {'wins' if wins else 'loses'} here: "
            f"{est.tokens_per_second:.1f} tok/s against {est.baseline_tokens_per_second:.1f} "
            f"without ({est.speedup:.2f}x) at accept length {est.accept_length:.2f}."
        ))
    if est.allreduce_share is not None and est.allreduce_ms is not None:
        lines.append(
            f"All-reduce is {est.allreduce_share:.0%} of the cycle ({est.allreduce_ms:.1f} ms)."
        )
    for s in scenarios:
        what = ", ".join(f"{k}={v:g}" for k, v in s.assumptions.items())
        lines.append(
            f"If {what}: {s.tokens_per_second:.1f} tok/s ({s.speedup:.2f}x), "
            f"break-even accept length {s.break_even_accept_length:.2f}."
        )
    return " ".join(lines)
