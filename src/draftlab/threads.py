"""How many CPU threads torch computes with: chosen once per command, the same way everywhere.

``--threads N``, else the environment variable ``DRAFTLAB_THREADS``, else the physical cores this
process may run on (``os.sched_getaffinity``, hyperthread siblings counted once where Linux says
which they are), shared among the processes of a ``torchrun`` job on this host, less the cores other
work keeps busy (the 1-minute load average, scaled to this process's share of the machine). torch's
own default is every logical CPU this process may use, hyperthreads included, and a library that
imports torch may have changed it already; on a busy small machine OpenMP's spinning threads can make
decoding many times slower than fewer threads would (2 threads on a 2-core machine under load: 15x
slower than 1). A count above the CPUs this process may use is refused: it only oversubscribes, and
very large counts crash OpenMP and the tokenizers' thread pool. The choice and why are recorded in
every document's ``provenance`` (:mod:`draftlab.documents`), so a number says how it was made.
"""

from __future__ import annotations

import os
from pathlib import Path

from draftlab.errors import DraftlabError

ENV = "DRAFTLAB_THREADS"


def allowed_cpus() -> set[int]:
    """The logical CPUs this process may run on (every CPU where affinity is unknown)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def physical_cores(cpus: set[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> int:
    """How many physical cores ``cpus`` span: hyperthread siblings count once. Where the topology is
    not readable (not Linux, a container hiding it), every logical CPU counts."""
    cores = set()
    for cpu in cpus:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            cores.add((topology.joinpath("physical_package_id").read_text().strip(),
                       topology.joinpath("core_id").read_text().strip()))
        except OSError:
            return len(cpus)
    return max(1, len(cores))


def machine_load() -> float:
    """The 1-minute load average (runnable tasks, machine-wide); 0 where the system does not say."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not Unix
        return 0.0


def default_threads() -> tuple[int, str]:
    """Physical cores this process may use, divided among the local processes of a torchrun job, less
    the cores the machine's load keeps busy (its share of them: the load counts every CPU); and why."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    cpus = allowed_cpus()
    cores = max(1, physical_cores(cpus) // max(1, local))
    load = machine_load()
    busy = round(load * len(cpus) / max(len(cpus), os.cpu_count() or 1))
    if busy < 1:
        return cores, "physical cores available"
    return max(1, cores - busy), f"physical cores available ({cores}) less the busy ones (load average {load:.1f})"


def parse_threads(text: str, where: str) -> int:
    """A thread count as given in ``where`` (an option or the environment variable): a whole number from 1
    to the CPUs this process may use."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise DraftlabError(f"{where} {text!r}: expected a whole number of threads >= 1 (e.g. 1 or 4)")
    most = len(allowed_cpus())
    if value > most:
        raise DraftlabError(f"{where} {value}: this process may use {most} CPU{'s' * (most != 1)}; give at most "
                            f"{most} (more threads only wait for each other)")
    return value


def choose_threads(option: int | None) -> tuple[int, str]:
    """The thread count and where it came from: ``--threads``, ``DRAFTLAB_THREADS`` or the default."""
    if option is not None:
        return parse_threads(str(option), "--threads"), "--threads"
    if os.environ.get(ENV, "").strip():
        return parse_threads(os.environ[ENV].strip(), ENV), ENV
    return default_threads()


def use_threads(option: int | None) -> int:
    """Set torch's intra-op threads for this command (once) and record them for ``provenance``."""
    import torch

    from draftlab.documents import record_threads

    count, source = choose_threads(option)
    torch.set_num_threads(count)
    record_threads(count, source)
    return count
