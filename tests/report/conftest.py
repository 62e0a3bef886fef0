"""Real draftlab outputs of the toy pair, as the commands print them with --json: probe, drift, plan
from the pair, two bench runs against the reference server and their comparison, inspect, check and
vocab compare (a few seconds in all)."""

from __future__ import annotations

import contextlib
import io
import json
import threading
from pathlib import Path

import pytest

from draftlab.cli import main

TEXTS = ["def __init__(self, name", "import os\nimport sys\n\n", "    for key, value in self."]


def run_json(argv: list[str], dest: Path) -> dict:
    """``draftlab ARGV --json``, its document written to ``dest`` as a user would redirect it."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json"])
    assert code in (0, None), f"draftlab {' '.join(argv)} exited {code}"
    dest.write_text(out.getvalue())
    return json.loads(out.getvalue())


@pytest.fixture(scope="session")
def toy_results(toy_pair, tmp_path_factory) -> dict[str, Path]:
    from draftlab.demo import perturbed_copy
    from draftlab.serve.http import make_server
    from draftlab.serve.load import load_context

    tmp = tmp_path_factory.mktemp("toy-results")
    t, d = str(toy_pair.target_dir), str(toy_pair.drafter_dir)
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": list(text.encode())}) + "\n" for text in TEXTS))
    flags = ["--steps", "3", "--topk", "1", "--num-draft-tokens", "4"]
    files = {name: tmp / f"{name}.json" for name in
             ("inspect", "check", "vocab-compare", "probe", "drift", "plan", "bench-compare")}
    run_json(["inspect", d], files["inspect"])
    run_json(["check", d, "--target", t], files["check"])
    run_json(["vocab", "compare", d, d], files["vocab-compare"])
    run_json(["probe", "--target", t, "--drafter", d, "--prompts", str(prompts), *flags, "--max-new-tokens", "32"],
             files["probe"])
    v2 = perturbed_copy(toy_pair.target_dir, tmp / "target-v2", scale=0.5)
    run_json(["drift", "--target-a", t, "--target-b", str(v2), "--prompts", str(prompts), "--drafter", d, *flags,
              "--max-new-tokens", "32"], files["drift"])
    run_json(["plan", "--target", t, "--drafter", d, "--prompts", str(prompts), "--grid", "1/1/2,3/1/4,3/4/8",
              "--max-new-tokens", "32", "--context", "32", "--repeats", "2", "--save-probe", str(tmp / "probes.json")],
             files["plan"])
    files["save-probe"] = tmp / "probes.json"  # plan's probe results: a list, one per config
    arms = []
    for label, drafter in (("baseline", None), ("eagle3", toy_pair.drafter_dir)):
        ctx = load_context(toy_pair.target_dir, drafter, **({} if drafter is None else
                                                            {"steps": 3, "topk": 1, "num_draft_tokens": 4}))
        server = make_server(ctx, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            for concurrency in (1, 2):
                arms.append(tmp / f"bench-{label}-{concurrency}.json")
                url = f"http://127.0.0.1:{server.server_address[1]}"
                run_json(["bench", "--base-url", url, "--api", "sglang", "--prompts", str(prompts), "--max-tokens",
                          "16", "--concurrency", str(concurrency), "--label", label, "-o", str(arms[-1])],
                         tmp / "stdout.json")
        finally:
            server.shutdown()
            ctx.engine.close()
    run_json(["bench", "compare", *map(str, arms)], files["bench-compare"])
    files["bench"] = arms[-1]  # a bench -o file, as written
    return files
