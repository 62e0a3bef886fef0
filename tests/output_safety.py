"""Every output option of every command, aimed at each input that command reads, at a FIFO and at a
character device: each try must end in one error line (exit 2) from the output rule, with every input's
bytes (sha256) and every special file as they were. Runs the CLI as a user does, one process per try.

The cases are output_cases.py beside it (shared with tests/cli/test_output_rule.py, which checks that
every option of type Path in the app is classified, and tries each in-process). A script, not a test
(pytest collects test_*.py only): its table is for benchmarks/RESULTS.md. The device is made with
os.mknod (1,3, as /dev/null) and needs root; without it that column says so.

    PYTHONPATH=$PWD/src python tests/output_safety.py
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from output_cases import CASES, Case, attacks, build_workspace, refused_by_rule, snapshot

REPO = Path(__file__).parents[1]


@dataclass
class Row:
    case: Case
    tries: int = 0
    refused: int = 0  # exit 2, one line, the output rule's refusal of that path
    unchanged: int = 0  # every input's sha256 and every special file as before
    fifo: str = "-"
    device: str = "no root: not tried"
    slowest_s: float = 0.0
    failures: list[str] = field(default_factory=list)


def run_case(case: Case, ws_root: Path, *, device: bool, timeout: float) -> Row:
    ws = build_workspace(ws_root)
    row = Row(case)
    tries = list(attacks(ws, case, device=device))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    for what, out in tries:
        before = snapshot(ws.root)
        started = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "draftlab", *case.command(ws, out)], capture_output=True,
                                  text=True, timeout=timeout, env=env, cwd=ws.root)
            code, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired:
            code, err = None, f"hung past {timeout:g} s"
        row.slowest_s = max(row.slowest_s, time.perf_counter() - started)
        lines = err.strip().splitlines()
        ok = code == 2 and len(lines) == 1 and refused_by_rule(lines[0], out)
        same = snapshot(ws.root) == before
        row.tries += 1
        row.refused += ok
        row.unchanged += same
        verdict = "refused" if ok and same else "NOT REFUSED"
        if what == "a FIFO":
            row.fifo = verdict
        elif what.startswith("a character device"):
            row.device = verdict
        if not (ok and same):
            row.failures.append(f"{case.option} {case.note} -> {what}: exit {code}, {err.strip()[:200]!r}, "
                                f"inputs {'unchanged' if same else 'CHANGED'}")
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="Seconds one try may take.")
    args = parser.parse_args()
    device = os.geteuid() == 0
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            rows.append(run_case(case, Path(tmp) / f"ws{i}", device=device, timeout=args.timeout))
            print(f"[{i + 1}/{len(CASES)}] {case.option} {case.note}: {rows[-1].refused}/{rows[-1].tries}",
                  file=sys.stderr)
    print(f"Python {platform.python_version()}, {platform.platform()}, root: {device}, "
          f"{time.perf_counter() - started:.0f} s\n")
    print("| output option | inputs it reads | tries | refused in one line (exit 2) | inputs' sha256 unchanged "
          "| FIFO | char device | slowest try |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        option = f"`{r.case.option}`" + (f" ({r.case.note})" if r.case.note else "")
        print(f"| {option} | {', '.join(r.case.inputs)} | {r.tries} | {r.refused}/{r.tries} | {r.unchanged}/{r.tries} "
              f"| {r.fifo} | {r.device} | {r.slowest_s:.1f} s |")
    total = sum(r.tries for r in rows)
    good = sum(r.refused == r.tries == r.unchanged for r in rows)
    print(f"\n{sum(r.refused for r in rows)}/{total} tries refused, {sum(r.unchanged for r in rows)}/{total} "
          f"left every input unchanged; {good}/{len(rows)} options clean")
    for r in rows:
        for line in r.failures:
            print(f"- {line}")
    return 0 if good == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
