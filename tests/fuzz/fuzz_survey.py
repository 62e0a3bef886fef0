"""A longer fuzzing run of every reader of published files (the targets beside it), as a table.

Per reader: inputs tried, clean errors (DraftlabError), results, crashes (anything else; goal 0),
the slowest case and the most memory one case allocated beyond what was live before it (tracemalloc: Python and numpy buffers).
The process runs under an address-space limit, so an input that made a reader allocate what a
header claims (2^60 bytes) would fail here as a crash instead of swapping.

A script beside the targets, not a test (pytest collects test_*.py only): ``DRAFTLAB_FUZZ_PROFILE=long``
runs the tests deeper and says pass or fail; this counts what each reader did, for benchmarks/RESULTS.md.

    PYTHONPATH=$PWD/src python tests/fuzz/fuzz_survey.py --examples 2000
"""

from __future__ import annotations

import argparse
import platform
import resource
import time
import tracemalloc
from dataclasses import dataclass, field

from fuzz_targets import TARGETS, Target, run_target
from hypothesis import HealthCheck, given, settings

from draftlab.errors import DraftlabError


@dataclass
class Tally:
    tried: int = 0
    clean: int = 0
    results: int = 0
    crashes: list[str] = field(default_factory=list)
    slowest_s: float = 0.0
    peak_mib: float = 0.0


def survey(target: Target, examples: int) -> Tally:
    tally = Tally()

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(target.strategy)
    def one(value: object) -> None:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        try:
            run_target(target, value)
            tally.results += 1
        except DraftlabError:
            tally.clean += 1
        except Exception as exc:  # noqa: BLE001 - a crash is what this counts
            tally.crashes.append(f"{type(exc).__name__}: {str(exc)[:160]}")
        tally.tried += 1
        tally.slowest_s = max(tally.slowest_s, time.perf_counter() - start)
        tally.peak_mib = max(tally.peak_mib, (tracemalloc.get_traced_memory()[1] - base) / 2**20)

    one()
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="Inputs per reader.")
    parser.add_argument("--memory-limit-gib", type=float, default=8.0, help="Address-space limit of this process.")
    args = parser.parse_args()
    limit = int(args.memory_limit_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import torch
    import transformers  # noqa: F401 - imported once here, so no case's time is the import (prompts load a tokenizer)

    torch.set_num_threads(1)
    tracemalloc.start()
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"torch {torch.__version__}; {args.examples} inputs per reader; address space <= {args.memory_limit_gib} GiB")
    print("| reader | inputs tried | clean errors | results | crashes | slowest case | peak traced memory |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    crashes = []
    total = time.perf_counter()
    for target in TARGETS:
        t = survey(target, args.examples)
        print(f"| {target.name} | {t.tried} | {t.clean} | {t.results} | {len(t.crashes)} | "
              f"{t.slowest_s * 1000:.1f} ms | {t.peak_mib:.1f} MiB |", flush=True)
        crashes += [f"{target.name}: {c}" for c in dict.fromkeys(t.crashes)]
    print(f"\ntotal {time.perf_counter() - total:.0f} s")
    for c in crashes:
        print("crash:", c)


if __name__ == "__main__":
    main()
