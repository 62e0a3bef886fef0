"""``draftlab profile``: measure the costs of a speculative cycle on this machine (PROFILE.json)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one, non_negative
from draftlab.cli.common import lower_on_oom, parse_ints
from draftlab.cli.deployed import EngineChoice, engine_choice
from draftlab.cli.groups import grouped
from draftlab.cli.output import JsonOption, show
from draftlab.cli.placement import Placement, ThreadsOption, placement
from draftlab.cost.profile import ModelInfo, Profile, save_profile
from draftlab.errors import DraftlabError
from draftlab.fsutil import refuse_overlap
from draftlab.report.profile import render_profile

if TYPE_CHECKING:
    from draftlab.engines.deployment import Deployment


@app.command()
@grouped
def profile(
    out: Annotated[Path, typer.Option(help="Where to write PROFILE.json.")],
    target: Annotated[Optional[Path], typer.Option(help="Target model folder (Hugging Face layout).")] = None,
    drafter: Annotated[Optional[Path], typer.Option(help="EAGLE-3 drafter folder: adds draft-step and draft-extend costs; mtp: the target's own MTP head's, as --engine serves it.")] = None,
    batch_sizes: Annotated[str, typer.Option(help="Batch sizes, e.g. 1,8,32.")] = "1",
    verify_tokens: Annotated[str, typer.Option(help="Tokens per sequence of a verify (1 = decode step).")] = "1,2,4,8,16,32,64",
    draft_rows: Annotated[str, typer.Option(help="Rows per sequence of a draft step (the topk values to plan).")] = "1,2,4,8",
    extend_tokens: Annotated[str, typer.Option(help="Accepted tokens per sequence of a draft-extend.")] = "1,2,3,4,5,6,7,8",
    context: Annotated[int, typer.Option(callback=at_least_one, help="KV-cache length every pass runs after.")] = 256,
    where: Placement = placement(device="cuda", device_map=False),
    warmup: Annotated[int, typer.Option(callback=non_negative, help="Untimed calls before each measurement.")] = 3,
    repeats: Annotated[int, typer.Option(callback=at_least_one,
        help="Timed calls per measurement (median and spread).")] = 10,
    overhead_ms: Annotated[float, typer.Option(callback=non_negative,
        help="Fixed per-cycle overhead to assume, ms.")] = 0.0,
    tp: Annotated[int, typer.Option(callback=at_least_one,
        help="Also time the all-reduce over this many processes (>= 2; NCCL on GPUs, gloo on CPU).")] = 1,
    hidden_size: Annotated[Optional[int], typer.Option(help="With --tp and no --target: the model's hidden size.")] = None,
    num_layers: Annotated[Optional[int], typer.Option(help="With --tp and no --target: the model's layer count.")] = None,
    asked: EngineChoice = engine_choice(),
    threads: ThreadsOption = None,
    json_out: JsonOption = False,
) -> None:
    """Time decode, verify, draft steps and draft-extend (and the TP all-reduce) on this machine.
    --drafter mtp times the target's own MTP head's passes instead (what plan prices MTP configs by)."""
    from draftlab.models.mtp import names_mtp

    mtp = names_mtp(drafter)
    refuse_overlap(out, {"--target": target, **({} if mtp else {"--drafter": drafter})})
    batches = parse_ints("--batch-sizes", batch_sizes)
    tokens = parse_ints("--verify-tokens", verify_tokens)
    if target is None and tp < 2:
        raise DraftlabError("give --target T (and --drafter D), or --tp P to time the all-reduce")
    if drafter is not None and target is None:
        raise DraftlabError("--drafter needs --target (the drafter reads the target's features)")
    result = Profile(model=ModelInfo(), verify=[])
    with lower_on_oom(batch_sizes=batch_sizes, context=context, verify_tokens=verify_tokens):
        if target is not None:
            from draftlab.models.devices import default_dtype

            where = replace(where, dtype=where.dtype or default_dtype(where.device))
            timing = {"batch_sizes": batches, "verify_tokens": tokens,
                      "draft_rows": parse_ints("--draft-rows", draft_rows),
                      "extend_tokens": parse_ints("--extend-tokens", extend_tokens), "warmup": warmup,
                      "repeats": repeats, "overhead_ms": overhead_ms}
            if mtp:
                result = _time_mtp(target, asked, where, context, **timing)
            else:
                deployment = None if drafter is None else asked.resolve(target, drafter)
                result = replace(_time_pair(target, drafter, deployment, where, context, **timing),
                                 deployment=asked.describe() if deployment is None else deployment.describe())
            hidden_size, num_layers = result.model.hidden_size, result.model.num_layers
        if tp >= 2:
            if hidden_size is None or num_layers is None:
                raise DraftlabError("--tp without --target needs --hidden-size and --num-layers")
            result = _add_allreduce(result, ModelInfo(hidden_size=hidden_size, num_layers=num_layers), tp,
                                    batches, tokens, warmup, repeats, where.dtype or "bfloat16", alone=target is None)
    save_profile(result, out)
    show(result, json_out, render_profile, out)


def _time_pair(target: Path, drafter: Path | None, deployment: Deployment | None, where: Placement, context: int,
               **timing: Any) -> Profile:
    """Load the target (and drafter) as placed, the target capturing the layers ``deployment`` names (none without
    a drafter, as its profile says), and time their passes after ``context`` tokens of KV cache."""
    from draftlab.cost.profiler import profile_costs
    from draftlab.cost.runtime_workload import runtime_workload
    from draftlab.models.drafter import Eagle3Drafter
    from draftlab.models.target import TargetRunner

    runner = TargetRunner.load(target, aux_layers=[] if deployment is None else list(deployment.aux.layers),
                               dtype=where.dtype, device=where.device)
    draft = None if drafter is None else Eagle3Drafter.load(drafter, target=runner, dtype=where.dtype,
                                                            device=where.device)
    workload = runtime_workload(runner, draft, context_tokens=context,
                                target_name=str(target), drafter_name=drafter and str(drafter))
    return profile_costs(workload, **timing)


def _time_mtp(target: Path, asked: EngineChoice, where: Placement, context: int, **timing: Any) -> Profile:
    """The target (handing out its final hidden state) and its own MTP head as ``asked``'s release serves it,
    their passes timed; a release that drafts the head as a chain (vLLM) has draft steps over one row only."""
    from draftlab.cost.profiler import profile_costs
    from draftlab.cost.runtime_workload import runtime_workload
    from draftlab.engines.mtp import target_support
    from draftlab.engines.mtp_head import MtpServing
    from draftlab.models.mtp import MTP, load_mtp

    serving = MtpServing(asked.engine, asked.version)
    runner, head = load_mtp(target, serving, dtype=where.dtype, device=where.device)
    support = target_support(target, asked.engine, asked.version)
    if support is not None and not support.trees:
        timing["draft_rows"] = [1]
    workload = runtime_workload(runner, None, context_tokens=context, target_name=str(target), drafter_name=MTP,
                                mtp=(runner, head))
    engine = serving.describe()
    return replace(profile_costs(workload, **timing), deployment=engine, mtp={**engine, **head.describe()})


def _add_allreduce(result: Profile, model: ModelInfo, tp: int, batches: list[int], tokens: list[int], warmup: int,
                   repeats: int, dtype: str, *, alone: bool) -> Profile:
    """``result`` with the all-reduce of ``tp`` processes timed; ``alone`` (no target timed): the model's
    shape and the timing settings recorded with it."""
    from draftlab.cost.allreduce import measure_allreduce
    from draftlab.cost.profiler import environment

    ar = measure_allreduce(tp=tp, hidden_size=model.hidden_size, num_layers=model.num_layers,
                           batch_sizes=batches, tokens=tokens, warmup=warmup, repeats=repeats, dtype=dtype)
    result = replace(result, allreduce=ar, environment=result.environment or environment())
    return replace(result, model=model, warmup=warmup, repeats=repeats) if alone else result
