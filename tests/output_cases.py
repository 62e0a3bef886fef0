"""Every CLI option that names an output, with a command that writes it and the inputs that command reads.

Shared by tests/cli/test_output_rule.py (each output tried against each of its inputs, a FIFO and a
device, in-process) and tests/output_safety.py (the same, as a user runs it, in a table).
:data:`OUTPUTS` and :data:`INPUTS` classify every option of type Path in the typer app; a new one that
is in neither makes the test fail, so no output escapes the rule unnoticed.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from builders import make_pair, tiny_target_config

# options of type Path, as "COMMAND --longest-name" (or the argument's name)
OUTPUTS = {
    "profile --out", "plan --save-costs", "plan --save-probe", "plan --plot", "bench --output",
    "bench compare --plot", "report --output", "vocab count --output", "vocab build --output",
    "vocab remap --output", "check --fix", "convert --out", "train --out", "capture --out", "regenerate --out",
    "launch --log-file", "sweep --out", "plan --schedule-out",
    "launch --log-file", "sweep --out", "probe --profile-out", "assess --out",
}
INPUTS = {
    "inspect path", "inspect --target", "check drafter", "check --target", "convert drafter", "convert --target",
    "profile --target", "profile --drafter", "plan --target", "plan --drafter", "plan --prompts", "plan --costs",
    "plan --probe", "plan --profile", "vocab count --data", "vocab count --tokenizer", "vocab coverage source",
    "vocab coverage --counts", "vocab coverage --tokenizer", "vocab compare a", "vocab compare b",
    "vocab compare --counts", "vocab build --counts", "vocab remap drafter", "vocab remap --mapping",
    "vocab remap --target", "generate --target", "generate --prompts", "generate --drafter", "bench --prompts",
    "bench compare files", "sweep --prompts", "probe --target", "probe --drafter", "probe --prompts",
    "probe --features", "drift --target-a", "drift --target-b", "drift --prompts", "drift --drafter",
    "train --target", "train --data", "train --init", "train --features", "train --remap", "train --eval-prompts",
    "capture --target", "capture --data", "capture --drafter", "regenerate --data", "regenerate --target",
    "report results", "launch --schedule", "serve --schedule", "sweep --schedule",
    "sweep --predicted",
    "report results", "assess --drafter", "assess --target", "assess --prompts", "assess --old-target",
    "assess --costs",
}

# what a refusal by the output rule says, after "OUT: "
RULE_WORDS = ("itself", "is inside", "holds", "under another name", "not a regular file", "is a folder",
              "not a folder")


@dataclass(frozen=True)
class Workspace:
    """The inputs every case reads, built once in ``root``."""

    root: Path

    def __getattr__(self, name: str) -> Path:
        return self.root / {"target": "target", "drafter": "drafter", "data": "data.jsonl",
                            "prompts": "prompts.jsonl", "counts": "counts.json", "mapping": "map.safetensors",
                            "profile": "PROFILE.json", "probe": "probe.json", "bench_a": "bench_a.json",
                            "bench_b": "bench_b.json", "features": "features"}[name]


def build_workspace(root: Path) -> Workspace:
    from draftlab.vocab import VocabMapping
    from draftlab.vocab.counts import TokenCounts

    root.mkdir(parents=True, exist_ok=True)
    ws = Workspace(root)
    make_pair(root, tiny_target_config("llama"), max_position_embeddings=1024)
    rows = "".join(json.dumps({"input_ids": [1, 2, 3, 4]}) + "\n" for _ in range(2))
    ws.data.write_text(rows)
    ws.prompts.write_text(rows)
    TokenCounts(512, {1: 3, 2: 2, 3: 1}).save(ws.counts)
    VocabMapping.from_target_ids(list(range(0, 256, 2)), 512).save(ws.mapping)
    ws.profile.write_text(json.dumps({"format": "draftlab-profile/1", "model": {"hidden_size": 64, "num_layers": 4},
                                      "verify": [{"batch_size": 1, "tokens": 1, "median_ms": 2.0}]}))
    ws.probe.write_text(json.dumps({"config": {"steps": 3, "topk": 1, "num_draft_tokens": 4},
                                    "mean_accept_length": 2.5, "batch_size": 1}))
    for name, label in (("bench_a", "a"), ("bench_b", "b")):
        getattr(ws, name).write_text(json.dumps({"label": label, "note": "a bench -o result stands here"}))
    ws.features.mkdir()
    (ws.features / "data_0.ckpt").write_bytes(b"captured features stand here")
    return ws


@dataclass(frozen=True)
class Case:
    """One output option, the command that writes it, and the inputs (Workspace names) that command reads."""

    option: str  # a key of OUTPUTS
    argv: Callable[[Workspace, str], list[str]]
    inputs: tuple[str, ...]
    folder: bool = False  # the output is a folder
    note: str = ""

    def command(self, ws: Workspace, out: Path) -> list[str]:
        return [str(a) for a in self.argv(ws, str(out))]


CASES = [
    Case("profile --out", lambda w, o: ["profile", "--target", w.target, "--drafter", w.drafter, "--device", "cpu",
                                        "--out", o], ("target", "drafter")),
    Case("plan --save-costs", lambda w, o: ["plan", "--target", w.target, "--drafter", w.drafter, "--prompts",
                                            w.prompts, "--device", "cpu", "--save-costs", o],
         ("target", "drafter", "prompts")),
    Case("plan --save-probe", lambda w, o: ["plan", "--target", w.target, "--drafter", w.drafter, "--prompts",
                                            w.prompts, "--device", "cpu", "--save-probe", o],
         ("target", "drafter", "prompts")),
    Case("plan --plot", lambda w, o: ["plan", "--target", w.target, "--drafter", w.drafter, "--prompts", w.prompts,
                                      "--device", "cpu", "--plot", o], ("target", "drafter", "prompts"),
         note="pair mode"),
    Case("plan --plot", lambda w, o: ["plan", "--costs", w.profile, "--probe", w.probe, "--plot", o],
         ("profile", "probe"), note="--costs mode"),
    Case("plan --schedule-out", lambda w, o: ["plan", "--costs", w.profile, "--probe", w.probe, "--schedule", "vllm",
                                              "--schedule-out", o], ("profile", "probe")),
    Case("bench --output", lambda w, o: ["bench", "--base-url", "http://127.0.0.1:9", "--prompts", w.prompts,
                                         "-o", o], ("prompts",)),
    Case("bench compare --plot", lambda w, o: ["bench", "compare", w.bench_a, w.bench_b, "--plot", o],
         ("bench_a", "bench_b")),
    Case("report --output", lambda w, o: ["report", w.bench_a, w.bench_b, "-o", o], ("bench_a", "bench_b")),
    Case("vocab count --output", lambda w, o: ["vocab", "count", "--data", w.data, "--tokenizer", w.target, "-o", o],
         ("data", "target")),
    Case("vocab build --output", lambda w, o: ["vocab", "build", "--counts", w.counts, "--size", "4", "-o", o],
         ("counts",)),
    Case("vocab remap --output", lambda w, o: ["vocab", "remap", w.drafter, "--mapping", w.mapping, "--target",
                                               w.target, "-o", o], ("drafter", "mapping", "target"), folder=True),
    Case("check --fix", lambda w, o: ["check", w.drafter, "-t", w.target, "--fix", o], ("drafter", "target"),
         folder=True),
    Case("convert --out", lambda w, o: ["convert", w.drafter, "--to", "speculators", "-t", w.target, "-o", o],
         ("drafter", "target"), folder=True),
    Case("train --out", lambda w, o: ["train", "--target", w.target, "--data", w.data, "--init", w.drafter,
                                      "--remap", w.counts, "--eval-prompts", w.prompts, "--max-steps", "1",
                                      "--out", o], ("target", "data", "drafter", "counts", "prompts"), folder=True,
         note="--data, --init"),
    Case("train --out", lambda w, o: ["train", "--target", w.target, "--features", w.features, "--max-steps", "1",
                                      "--out", o], ("target", "features"), folder=True, note="--features"),
    Case("capture --out", lambda w, o: ["capture", "--target", w.target, "--data", w.data, "--drafter", w.drafter,
                                        "--out", o], ("target", "data", "drafter"), folder=True),
    Case("regenerate --out", lambda w, o: ["regenerate", "--data", w.data, "--target", w.target, "--out", o],
         ("data", "target")),
    Case("probe --profile-out", lambda w, o: ["probe", "--target", w.target, "--drafter", w.drafter, "--prompts",
                                              w.prompts, "--steps", "2", "--topk", "1", "--num-draft-tokens", "3",
                                              "--max-new-tokens", "4", "--profile-out", o],
         ("target", "drafter", "prompts")),
    Case("launch --log-file", lambda w, o: ["launch", "sglang", "--target", w.target, "--drafter", w.drafter,
                                            "--skip-check", "--log-file", o], ("target", "drafter")),
    Case("assess --out", lambda w, o: ["assess", "--drafter", w.drafter, "--target", w.target, "--prompts", w.prompts,
                                       "--costs", w.profile, "--out", o], ("drafter", "target", "prompts", "profile"),
         folder=True),
    Case("sweep --out", lambda w, o: ["sweep", "--engine", "draftlab", "--target", w.target, "--drafter", w.drafter,
                                      "--grid", "1,3,1,4", "--prompts", w.prompts, "--out", o],
         ("target", "drafter", "prompts"), folder=True),
]


def attacks(ws: Workspace, case: Case, *, device: bool) -> Iterator[tuple[str, Path]]:
    """(what, output path) pairs the case must refuse: each input, a file in each input folder, a path
    inside it, a hard link and a symlink to each input file, a link to each input folder, a FIFO, and a
    character device like /dev/null (``device``: only root may make one)."""
    aliases = ws.root / "aliases"
    aliases.mkdir(exist_ok=True)
    for name in case.inputs:
        path = getattr(ws, name)
        yield f"{name} itself", path
        if path.is_dir():
            for inner in sorted(p for p in path.iterdir() if p.is_file())[:2]:
                yield f"{name}/{inner.name}", inner
            yield f"inside {name}", path / "new"
            link = aliases / f"{name}.dirlink"
            if not link.exists():
                link.symlink_to(path, target_is_directory=True)
            yield f"inside {name} through a symlink", link / "new"
            first = sorted(p for p in path.iterdir() if p.is_file())[0]
            hard = aliases / f"{name}.{first.name}.hardlink"
        else:
            hard = aliases / f"{name}.hardlink"
            soft = aliases / f"{name}.symlink"
            if not soft.exists():
                soft.symlink_to(path)
            yield f"symlink to {name}", soft
            first = path
        if not hard.exists():
            os.link(first, hard)
        yield f"hard link to {first.relative_to(ws.root)}", hard
    yield "the folder holding every input", ws.root
    fifo = ws.root / "specials" / "fifo"
    fifo.parent.mkdir(exist_ok=True)
    if not fifo.exists():
        os.mkfifo(fifo)
    yield "a FIFO", fifo
    if device:
        null = ws.root / "specials" / "null"
        if not null.exists():
            os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        yield "a character device (1,3, as /dev/null)", null


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root``: sha256 of a regular file's bytes, the kind of anything else."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            mode = os.lstat(path).st_mode
            key = str(path.relative_to(root))
            if stat.S_ISREG(mode):
                out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(mode):
                out[key] = f"link to {os.readlink(path)}"
            else:
                out[key] = {stat.S_IFDIR: "dir", stat.S_IFIFO: "fifo", stat.S_IFCHR: "chardev"}.get(stat.S_IFMT(mode), "?")
    return out


def refused_by_rule(line: str, out: Path) -> bool:
    """``line`` is the output rule's one-line refusal of ``out``."""
    head = f"draftlab: error: {out}: "
    return line.startswith(head) and any(w in line[len(head):] for w in RULE_WORDS)
