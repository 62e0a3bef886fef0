"""``--schedule ENGINE [--engine-version V] [--schedule-out FILE]``: checked before any work, applied to a plan."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from draftlab.cost.plan import Plan
from draftlab.cost.schedule import engine_schedule
from draftlab.engines.schedule import EngineSchedule, check_release, dumps
from draftlab.errors import DraftlabError
from draftlab.fsutil import write_text_atomic


@dataclass(frozen=True)
class ScheduleRequest:
    """What the user asked to be written; the release is resolved (and refused) when this is made."""

    engine: str
    version: str
    out: Path | None
    max_batch_size: int | None

    @classmethod
    def of(cls, engine: str | None, version: str | None, out: Path | None,
           max_batch_size: int | None) -> ScheduleRequest | None:
        """None without ``--schedule``; the options that need it are refused alone."""
        if engine is None:
            given = [name for name, v in (("--engine-version", version), ("--schedule-out", out),
                                          ("--schedule-max-batch", max_batch_size)) if v is not None]
            if given:
                raise DraftlabError(f"{given[0]} goes with --schedule sglang|vllm|trtllm")
            return None
        return cls(engine, check_release(engine, version), out, max_batch_size)

    def write(self, plan: Plan) -> EngineSchedule:
        """The plan's schedule in the engine's format, written to ``out`` (atomically) when given; where
        speculation loses at every batch size, the one with K = 0 everywhere and that verdict (a result)."""
        written = engine_schedule(plan, self.engine, self.version, max_batch_size=self.max_batch_size, all_off=True)
        if self.out is not None:
            write_text_atomic(self.out, dumps(written.value))
        return written

