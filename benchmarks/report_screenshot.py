"""The demo's report as a PNG for the README (docs/demo-report.png): run ``draftlab demo`` quietly,
load its page in headless Chromium, crop the blank space below the page, save as a palette PNG.

    PYTHONPATH=src python benchmarks/report_screenshot.py [-o docs/demo-report.png]
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import tempfile
from pathlib import Path

import matplotlib.image
import numpy as np
from PIL import Image  # matplotlib's own dependency
from rich.console import Console

from draftlab.demo import run_demo

WIDTH, TALL = 1100, 16000  # a window taller than the page; what lies below it is cropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=Path("docs/demo-report.png"))
    args = parser.parse_args()
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        raise SystemExit("needs chromium (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        demo = run_demo(Console(file=io.StringIO(), width=100), Path(tmp) / "demo")
        shot = Path(tmp) / "shot.png"
        subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={tmp}/profile", f"--window-size={WIDTH},{TALL}", f"--screenshot={shot}",
                        demo.report.resolve().as_uri()], check=True, capture_output=True, timeout=120)
        pixels = matplotlib.image.imread(shot)[..., :3]
    inked = np.flatnonzero((pixels < 0.95).any(axis=(1, 2)))
    if inked.size == 0 or inked[-1] >= TALL - 1:
        raise SystemExit(f"the page is blank or taller than {TALL} px; raise TALL")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    page = Image.fromarray((pixels[: inked[-1] + 40] * 255).round().astype(np.uint8))
    page.quantize(colors=256).save(args.out, optimize=True)  # a palette PNG: a fraction of the size, same look
    print(f"wrote {args.out}: {WIDTH} x {inked[-1] + 40} px, {args.out.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
