"""``draftlab train``'s terminal summary and its ``--json`` document."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from draftlab.report.format import fmt


def train_document(result: Any) -> dict[str, Any]:
    """The issue's object: out, init, vocab, steps, tokens, tokens_per_second, final_loss,
    accuracy_by_step, eval [{step, accept_length, ...}] (plus interrupted, and the aux layers, draft
    vocabulary size and notes on what was chosen for the user)."""
    return {"out": str(result.out), "init": result.init, "vocab": result.vocab, "steps": result.steps,
            "tokens": result.tokens, "tokens_per_second": result.tokens_per_second, "final_loss": result.final_loss,
            "accuracy_by_step": result.accuracy_by_step, "eval": result.eval, "interrupted": result.interrupted,
            "aux_layers": result.aux_layers, "draft_vocab_size": result.draft_vocab_size, "notes": result.notes,
            "engine": result.engine, "engine_version": result.engine_version, "captured_layers": result.captured_layers}


def render_train(result: Any, console: Console) -> None:
    state = "interrupted, checkpoint written" if result.interrupted else "done"
    console.print(f"[bold]{result.out}[/]: {result.steps} steps ({state}); vocabulary {result.vocab}"
                  + (f" from {result.init}" if result.init else "") + f"; {result.tokens} tokens, "
                  f"{result.tokens_per_second:.0f} tok/s; final loss {fmt(result.final_loss, '.4f')}")
    for note in result.notes:
        console.print(f"[yellow]{note}[/yellow]")
    table = Table(title=None)
    table.add_column("TTT step", justify="right")
    table.add_column("teacher-forced accuracy", justify="right")
    for i, acc in enumerate(result.accuracy_by_step):
        table.add_row(str(i), f"{acc:.3f}")
    console.print(table)
    if result.eval:
        evals = Table(title=None)
        evals.add_column("step", justify="right")
        evals.add_column("exact accept length", justify="right")
        for e in result.eval:
            evals.add_row(str(e["step"]), f"{e['accept_length']:.3f}")
        console.print(evals)
    console.print(f"Serve it: draftlab check {result.out} --target TARGET (both engines), then launch.")
