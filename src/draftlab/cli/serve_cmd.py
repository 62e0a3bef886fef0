"""``draftlab serve``: the reference speculative decoder behind SGLang- and vLLM-compatible HTTP."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.deployed import EngineChoice, engine_choice
from draftlab.cli.groups import grouped
from draftlab.cli.options import HostOption, NumDraftTokensOption, StepsOption, SyntheticAcceptanceOption, TopkOption
from draftlab.cli.placement import Placement, ThreadsOption, placement
from draftlab.console import console, err_console


@app.command()
@grouped
def serve(
    target: Annotated[str, typer.Option("--target", help="Target model folder.")],
    drafter: Annotated[Optional[str], typer.Option(
        "--drafter", help="EAGLE-3 drafter folder (omit: plain decoding).")] = None,
    steps: StepsOption = None,
    topk: TopkOption = None,
    num_draft_tokens: NumDraftTokensOption = None,
    host: HostOption = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="0 picks a free port (printed).")] = 30000,
    where: Placement = placement(device="cpu", device_map=False),
    asked: EngineChoice = engine_choice(),
    schedule: Annotated[Optional[Path], typer.Option(
        "--schedule", help="Batch requests and draft per batch size as this schedule says (a file written by "
        "draftlab plan --schedule ENGINE --schedule-out FILE, read the way that engine reads it).")] = None,
    max_batch: Annotated[Optional[int], typer.Option(
        "--max-batch", min=1, help="Requests decoded together (default: 48 with --schedule, else 1: one at a "
        "time).")] = None,
    synthetic_acceptance: SyntheticAcceptanceOption = None,
    synthetic_seed: Annotated[int, typer.Option(
        "--synthetic-seed", help="Seed of the synthetic acceptance draws.")] = 0,
    threads: ThreadsOption = None,
) -> int:
    """Serve /v1/completions, /v1/chat/completions, /generate, /get_server_info, /metrics, /health."""
    from draftlab.acceptance.synthetic import parse_synthetic

    synthetic = None if synthetic_acceptance is None else parse_synthetic(synthetic_acceptance)
    deployment = None if drafter is None else asked.resolve(target, drafter)
    from draftlab.serve.http import make_server
    from draftlab.serve.load import load_context

    loaded = None
    if schedule is not None:
        from draftlab.engines.schedule import load_schedule

        loaded = load_schedule(schedule)
    with err_console.status("loading models"):
        ctx = load_context(target, drafter, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens,
                           dtype=where.dtype, device=where.device, deployment=deployment, synthetic=synthetic,
                           synthetic_seed=synthetic_seed, schedule=loaded, max_batch=max_batch)
    server = make_server(ctx, host, port)
    bound_host, bound_port = server.server_address[:2]
    shape = (f"EAGLE3 steps {ctx.spec['num_steps']} topk {ctx.spec['eagle_topk']} "
             f"draft tokens {ctx.spec['num_draft_tokens']}") if ctx.spec else "no drafter"
    if loaded is not None:
        shape += f", draft length per batch size from {loaded.path}"
    if synthetic is not None:
        shape += f", synthetic acceptance {synthetic.source}"
    console.print(f"serving {ctx.model_name} ({shape}) at http://{bound_host}:{bound_port}; Ctrl-C stops it",
                  markup=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.server_close()
        ctx.engine.close()
        err_console.print("draftlab: interrupted")
        sys.stdout.flush()
        sys.stderr.flush()
        # Leave without running C++ static destructors: after decoding in the engine's worker thread,
        # torch's thread pools can abort the process there ("terminate called without an active
        # exception", about 1 exit in 20), turning a clean Ctrl-C into SIGABRT.
        os._exit(130)
    server.server_close()
    ctx.engine.close()
    return 0
