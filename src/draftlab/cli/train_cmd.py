"""``draftlab train``: fine-tune a drafter (``--init``) or train one from scratch, evaluated by the exact probe."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from draftlab.cli.app import app
from draftlab.cli.checks import at_least_one, non_negative, positive
from draftlab.cli.common import lower_on_oom, main_process, parse_layer_ids
from draftlab.cli.deployed import EngineChoice, engine_choice
from draftlab.cli.groups import OptionGroup, grouped, option
from draftlab.cli.options import NumDraftTokensOption, StepsOption, TargetOption, TopkOption
from draftlab.cli.output import JsonOption, show
from draftlab.cli.placement import Placement, ThreadsOption, placement


def _from_scratch(draft_vocab_size: int | None, aux_layers: str | None, variant: str | None,
                  sliding_window: int | None) -> dict[str, Any]:
    return {"draft_vocab_size": draft_vocab_size, "variant": variant, "sliding_window": sliding_window,
            "aux_layers": None if aux_layers is None else parse_layer_ids(aux_layers)}


# what a drafter trained from scratch is made of (a warm start keeps --init's), as TrainOptions' keywords
SCRATCH = OptionGroup((
    option("draft_vocab_size", Annotated[Optional[int], typer.Option(
        "--draft-vocab-size", callback=at_least_one, help="From scratch: draft vocabulary size, built from the "
        "data's counts (default 32000, or the target's whole vocabulary when smaller).")]),
    option("aux_layers", Annotated[Optional[str], typer.Option(
        "--aux-layers", help="From scratch: target layers a,b,c whose outputs the drafter fuses (default: the "
        "engines' default, or 3 spread evenly over a target under 8 layers).")]),
    option("variant", Annotated[Optional[str], typer.Option(
        "--variant", help="From scratch: eagle3 (default) or eagle3.1 (fc_norm + norm_output). A warm start keeps "
        "the variant of --init.")]),
    option("sliding_window", Annotated[Optional[int], typer.Option(
        "--sliding-window", callback=at_least_one, help="From scratch: every draft layer attends to the last W "
        "positions only (speculators' default since v0.7.0, W 2048); vLLM serves the window from the config, "
        "SGLang only with --speculative-draft-window-size W. A warm start keeps --init's window.")]),
), _from_scratch)


@app.command("train")
@grouped
def train_command(
    target: TargetOption,
    out: Annotated[Path, typer.Option("--out", help="New drafter folder (SpecForge layout; checkpoints too).")],
    data: Annotated[Optional[Path], typer.Option(
        "--data", help="JSONL as vocab count reads it (messages, conversations, text, input_ids + loss_mask); "
                       "the target runs online.")] = None,
    init: Annotated[Optional[Path], typer.Option(
        "--init", help="Warm start from this drafter: every tensor, its vocabulary and aux layers kept.")] = None,
    features: Annotated[Optional[Path], typer.Option(
        "--features", help="Captured hidden states (the layouts probe --features reads, with the final state) "
                           "instead of --data.")] = None,
    remap: Annotated[Optional[Path], typer.Option(
        "--remap", help="With --init: rebuild its vocabulary from these counts (vocab count) via vocab remap.")] = None,
    max_steps: Annotated[Optional[int], typer.Option("--max-steps", callback=at_least_one,
        help="Optimizer steps to run.")] = None,
    epochs: Annotated[Optional[float], typer.Option("--epochs", callback=positive,
        help="Passes over the data (or --max-steps).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", callback=at_least_one,
        help="Rows per optimizer step (all processes).")] = 8,
    grad_accum: Annotated[int, typer.Option("--grad-accum", callback=at_least_one,
        help="Micro-batches per optimizer step.")] = 1,
    seq_len: Annotated[int, typer.Option("--seq-len", callback=at_least_one,
        help="Tokens per row (longer rows are cut).")] = 2048,
    lr: Annotated[float, typer.Option("--lr", callback=positive, help="Peak AdamW learning rate.")] = 1e-4,
    warmup: Annotated[int, typer.Option("--warmup", callback=non_negative,
        help="Linear warm-up steps before the cosine decay.")] = 0,
    ttt_length: Annotated[int, typer.Option("--ttt-length", callback=at_least_one,
        help="Training-time-test steps unrolled.")] = 7,
    scratch: dict[str, Any] = SCRATCH,
    eval_prompts: Annotated[Optional[Path], typer.Option(
        "--eval-prompts", help="Held-out prompts (as probe reads them) for the exact accept length.")] = None,
    eval_every: Annotated[int, typer.Option("--eval-every", callback=non_negative,
        help="Evaluate every N steps (and at the end).")] = 0,
    eval_max_new_tokens: Annotated[int, typer.Option(
        "--eval-max-new-tokens", callback=at_least_one, help="Continuation tokens per eval prompt.")] = 64,
    save_every: Annotated[int, typer.Option("--save-every", callback=non_negative,
        help="Checkpoint every N steps (and at the end).")] = 0,
    steps: StepsOption = None,
    topk: TopkOption = None,
    num_draft_tokens: NumDraftTokensOption = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its checkpoint.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Initialisation and data-order seed.")] = 0,
    where: Placement = placement(dtype="float32"),
    asked: EngineChoice = engine_choice(window=False),
    compile_layer: Annotated[Optional[bool], typer.Option("--compile/--no-compile", help=(
        "Run the drafter's layer and the target's dense layers through torch.compile (default: on CUDA only; "
        "flex attention is compiled on CUDA either way)."))] = None,
    json_out: JsonOption = False,
    threads: ThreadsOption = None,
) -> None:
    """Train an EAGLE-3 drafter with SpecForge's TTT loss; OUT loads in SGLang and vLLM."""
    deployment = None if init is None else asked.resolve(target, init)
    from draftlab.report.train import render_train, train_document
    from draftlab.train.trainer import TrainOptions, train

    options = TrainOptions(
        target=target, out=out, data=data, init=init, features=features, remap=remap, max_steps=max_steps,
        epochs=epochs, batch_size=batch_size, grad_accum=grad_accum, seq_len=seq_len, lr=lr, warmup=warmup,
        ttt_length=ttt_length, **scratch, eval_prompts=eval_prompts, eval_every=eval_every, eval_max_new_tokens=eval_max_new_tokens,
        save_every=save_every, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens, resume=resume, seed=seed,
        deployment=deployment, **where.loading(), progress=not json_out, compile=compile_layer)
    with lower_on_oom(batch_size=batch_size, seq_len=seq_len, ttt_length=ttt_length):
        result = train(options)
    if main_process():
        show(result, json_out, render_train, as_json=train_document)
    if result.interrupted:
        raise typer.Exit(130)

