"""Commands that load no model import neither torch nor transformers, so they start at once.

Each command runs in a fresh interpreter on real tiny inputs (a synthetic target/drafter pair, counts, a
mapping, a bench server in this process, a profile and a probe file) and reports which heavy modules its
``sys.modules`` holds afterwards. Every command's ``--help`` runs too, discovered from the app itself, so
a new command is covered without editing this list; ``--help`` and ``inspect`` also go without numpy and
httpx. (How fast they start is measured in benchmarks/inspect_speed.py, not asserted here.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from builders import make_pair, tiny_target_config

import draftlab
from draftlab.cost.profile import FORMAT as PROFILE_FORMAT

HEAVY = ("torch", "transformers")  # 1.9 s of imports on the 2-core dev VM
# What --help and inspect (the commands people run first, and most) also do without: ~0.2 s together
STARTUP = HEAVY + ("numpy", "httpx")

# Runs draftlab.cli.main on each argv list in turn; after each, records its exit code and the heavy
# modules loaded so far (the first argv that loads one is the culprit).
CHILD = """
import json, sys
from draftlab.cli import main
heavy = {heavy!r}
report = []
for argv in json.loads(sys.argv[1]):
    code = main(argv)
    report.append({{"argv": argv, "code": code, "heavy": [m for m in heavy if m in sys.modules]}})
with open(sys.argv[2], "w") as f:
    json.dump(report, f)
"""

# Lists every command path of the app (["vocab", "build"], ...), from the click command typer builds.
LIST_COMMANDS = """
import json, typer
from draftlab.cli.app import app

def walk(command, path):
    subs = getattr(command, "commands", None)
    if subs is None:
        return [path]
    return [path] + [p for name in sorted(subs) for p in walk(subs[name], path + [name])]

print(json.dumps(walk(typer.main.get_command(app), [])))
"""


def run_fresh(tmp: Path, argvs: list[list[str]]) -> list[dict]:
    """Run ``argvs`` one after another in one new interpreter; per argv, the :data:`STARTUP` modules loaded."""
    report = tmp / f"report-{len(list(tmp.glob('report-*')))}.json"
    env = {**os.environ, "PYTHONPATH": str(Path(draftlab.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", CHILD.format(heavy=STARTUP), json.dumps(argvs), str(report)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and report.exists(), done.stderr[-3000:]
    steps = json.loads(report.read_text())
    for step in steps:
        assert step["code"] == 0, f"`draftlab {' '.join(step['argv'])}` exited {step['code']}: {done.stderr[-3000:]}"
    return steps


def assert_none_of(modules: tuple[str, ...], step: dict) -> None:
    loaded = [m for m in step["heavy"] if m in modules]
    assert not loaded, f"`draftlab {' '.join(step['argv'])}` imported {', '.join(loaded)}"


class OpenAIStream(BaseHTTPRequestHandler):
    """A completions server that streams two tokens and their usage, as vLLM and SGLang do."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        usage = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}
        for event in ({"choices": [{"index": 0, "text": "ab"}]}, usage):
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory):
    """Paths of every input the commands read, and the URL of a bench server alive for the module."""
    tmp = tmp_path_factory.mktemp("start")
    drafter, target = make_pair(tmp / "clean", tiny_target_config("llama"))
    renamed, _ = make_pair(tmp / "renamed", tiny_target_config("llama"), layer_prefix="layers.0.")  # for --fix
    counts = tmp / "counts.json"
    seen = {str(t): 1 + (t * 37) % 11 for t in range(0, 512, 3)}
    counts.write_text(json.dumps({"vocab_size": 512, "num_tokens": sum(seen.values()), "counts": seen}))
    prompts = tmp / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello"}\n{"prompt": "world"}\n')

    def points(*pairs: tuple[int, float]) -> list[dict]:
        return [{"batch_size": 1, "tokens": n, "median_ms": ms, "p10_ms": ms, "p90_ms": ms, "min_ms": ms,
                 "max_ms": ms, "repeats": 5} for n, ms in pairs]

    profile = tmp / "profile.json"
    profile.write_text(json.dumps({
        "format": PROFILE_FORMAT, "model": {"target": "t", "model_type": "llama", "hidden_size": 64, "num_layers": 8,
                                            "vocab_size": 512},
        "verify": points((1, 10.0), (4, 12.0), (8, 16.0)), "draft_step": points((1, 1.0), (4, 1.5)),
        "draft_extend": points((1, 2.0), (4, 2.6))}))
    probe = tmp / "probe.json"
    probe.write_text(json.dumps({"config": {"steps": 3, "topk": 1, "num_draft_tokens": 4}, "mean_accept_length": 2.5}))
    accept = tmp / "speculation_profile.json"  # an acceptance profile (probe --profile-out)
    accept.write_text(json.dumps({"schema_version": "1.0", "num_speculative_tokens": 3, "mean_accept_length": 2.5,
                                  "marginal_accept_rates": [0.8, 0.5, 0.2], "accept_length_model": "chain_analytic"}))

    server = ThreadingHTTPServer(("127.0.0.1", 0), OpenAIStream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {"tmp": tmp, "drafter": drafter, "renamed": renamed, "target": target, "counts": counts, "prompts": prompts,
           "profile": profile, "probe": probe, "accept": accept, "url": f"http://127.0.0.1:{server.server_address[1]}"}
    server.shutdown()


def commands(i: dict) -> dict[str, list[list[str]]]:
    """Each case: the argvs run in one interpreter (later ones may read what earlier ones wrote)."""
    d, t, tmp = str(i["drafter"]), str(i["target"]), i["tmp"]
    bench = ["bench", "--base-url", i["url"], "--api", "openai", "--model", "m", "--prompts", str(i["prompts"]),
             "--concurrency", "1", "--warmup", "0"]
    mapping = str(tmp / "built.safetensors")
    return {
        "inspect": [["inspect", d, "--json"]],
        "inspect target": [["inspect", t, "--json"]],
        "check": [["check", d, "--target", t, "--json"]],
        "check --fix": [["check", str(i["renamed"]), "--target", t, "--fix", str(tmp / "fixed"), "--json"]],
        "convert": [["convert", str(i["renamed"]), "--to", "speculators", "-o", str(tmp / "spec"), "--target", t,
                     "--json"],
                    ["convert", str(tmp / "spec"), "--to", "specforge", "-o", str(tmp / "flat"), "--json"]],
        "vocab coverage": [["vocab", "coverage", d, "--counts", str(i["counts"]), "--json"]],
        "vocab build": [["vocab", "build", "--counts", str(i["counts"]), "--size", "64", "-o", mapping]],
        "vocab compare": [["vocab", "build", "--counts", str(i["counts"]), "--size", "128", "-o",
                           str(tmp / "b.safetensors")],
                          ["vocab", "compare", d, str(tmp / "b.safetensors"), "--counts", str(i["counts"]), "--json"]],
        "vocab remap": [["vocab", "build", "--counts", str(i["counts"]), "--size", "96", "-o", str(tmp / "r.safetensors")],
                        ["vocab", "remap", d, "--mapping", str(tmp / "r.safetensors"), "-o", str(tmp / "mean"), "--json"],
                        ["vocab", "remap", d, "--mapping", str(tmp / "r.safetensors"), "-o", str(tmp / "warm"),
                         "--target", t, "--json"]],
        "launch --dry-run": [["launch", "sglang", "--target", t, "--drafter", d, "--steps", "3", "--topk", "1",
                              "--num-draft-tokens", "4", "--dry-run", "--json"]],
        "sweep --dry-run": [["sweep", "--engine", "sglang", "--target", t, "--drafter", d, "--grid", "1,0,0,0 1,3,1,4",
                             "--dry-run", "--json"]],
        "bench": [[*bench, "--label", "base", "-o", str(tmp / "base.json"), "--json"]],
        "bench compare": [[*bench, "--label", "base", "-o", str(tmp / "b1.json")],
                          [*bench, "--label", "eagle", "-o", str(tmp / "e1.json")],
                          ["bench", "compare", str(tmp / "b1.json"), str(tmp / "e1.json"), "--plot", str(tmp / "c.png")]],
        "plan from engine numbers": [["plan", "--baseline-tps", "82", "--spec-tps", "52", "--accept-length", "1.5",
                                      "--allreduce-ms", "25", "--what-if", "accept_length=3.2", "--json"]],
        "plan --costs --probe": [["plan", "--costs", str(i["profile"]), "--probe", str(i["probe"]),
                                  "--plot", str(tmp / "plan.png"), "--json"]],
        "plan --costs --profile": [["plan", "--costs", str(i["profile"]), "--profile", str(i["accept"]), "--json"]],
        "launch --synthetic-acceptance": [["launch", "vllm", "--target", t, "--drafter", d, "--steps", "3", "--dry-run",
                                           "--synthetic-acceptance", str(i["accept"]), "--json"]],
        "report": [[*bench, "--label", "base", "-o", str(tmp / "rb.json")],
                   [*bench, "--label", "eagle", "-o", str(tmp / "re.json")],
                   ["report", str(tmp / "rb.json"), str(tmp / "re.json"), "-o", str(tmp / "report.html")]],
    }


CASES = ("inspect", "inspect target", "check", "check --fix", "convert", "vocab coverage", "vocab build", "vocab compare",
         "vocab remap", "launch --dry-run", "sweep --dry-run", "bench", "bench compare", "plan from engine numbers",
         "plan --costs --probe", "plan --costs --profile", "launch --synthetic-acceptance", "report")


@pytest.mark.parametrize("case", CASES)
def test_command_starts_without_torch(inputs: dict, case: str) -> None:
    cases = commands(inputs)
    assert set(cases) == set(CASES)
    report = run_fresh(inputs["tmp"], cases[case])
    for step in report:
        assert_none_of(HEAVY if case not in ("inspect", "inspect target") else STARTUP, step)
    tmp = inputs["tmp"]
    expected = {"check --fix": tmp / "fixed" / "config.json", "convert": tmp / "flat" / "model.safetensors",
                "vocab build": tmp / "built.safetensors",
                "vocab remap": tmp / "warm" / "model.safetensors", "bench": tmp / "base.json",
                "bench compare": tmp / "c.png", "plan --costs --probe": tmp / "plan.png",
                "report": tmp / "report.html"}
    if case in expected:
        assert expected[case].is_file()  # the command did its work, not just started


def test_every_help_starts_without_torch(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(draftlab.__file__).parents[1])}
    listed = subprocess.run([sys.executable, "-c", LIST_COMMANDS], env=env, capture_output=True, text=True,
                            timeout=300)
    assert listed.returncode == 0, listed.stderr[-3000:]
    paths = json.loads(listed.stdout)
    names = {" ".join(p) for p in paths}
    assert {"", "inspect", "check", "vocab", "vocab remap", "bench", "bench compare", "launch", "sweep", "plan",
            "profile", "generate", "probe", "drift", "serve"} <= names  # the walk found the commands
    for step in run_fresh(tmp_path, [[*p, "--help"] for p in paths]):
        assert_none_of(STARTUP, step)
