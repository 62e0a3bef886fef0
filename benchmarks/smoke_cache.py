"""Carry this machine's trained toys to a device whose Python differs, so the GPU smoke run does not retrain them.

The toys' cache keys name the Python version (their corpus is the standard library's own source), so a device on
Python 3.12 would train every toy again, minutes of device time. This copies each toy built here under the
device's key into a folder to carry (`run`'s carry) and point ``DRAFTLAB_CACHE`` at:

    PYTHONPATH=src python benchmarks/smoke_cache.py --python 3.12 --out .smoke-cache
    # on the device: DRAFTLAB_CACHE=$PWD/.smoke-cache PYTHONPATH=src python3 benchmarks/gpu_smoke.py ...

The smoke run checks that commands work and that probe equals generate on whatever weights the toys hold, so
toys trained on another version's corpus serve it as well. Build them first (the CPU smoke run or the tests).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from draftlab.toy.pair import cache_root

TOYS = ("toy-v", "toy-mtp-v", "toy-mtp-eagle3-v")  # the toys the variant and toy pairs read


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="the device's Python version, e.g. 3.12")
    parser.add_argument("--out", default=".smoke-cache", help="the folder to carry (default: .smoke-cache)")
    args = parser.parse_args()
    here = f"py{sys.version_info.major}{sys.version_info.minor}"
    there = "py" + args.python.replace(".", "")
    built = sorted(p for p in cache_root().glob(f"*{here}*") if p.is_dir() and p.name.startswith(TOYS))
    if not built:
        print(f"no toys under {cache_root()} for {here}: build them first (the CPU smoke run)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    for folder in built:
        copy = out / folder.name.replace(here, there)
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(folder, copy)
        print(copy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
