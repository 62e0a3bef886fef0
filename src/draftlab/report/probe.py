"""Terminal rendering of ``probe`` results (rich): exact greedy accept lengths, or the sampled estimate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from draftlab.acceptance.by_context import bucket_label

if TYPE_CHECKING:
    from draftlab.probe.probe import ProbeResult


def render_probe(result: ProbeResult, console: Console) -> None:
    """One row per prompt with its accept lengths, then the means, acceptance by step and histogram."""
    if result.estimate:
        _render_estimate(result, console)
        return
    cfg = result.config
    table = Table(title=f"probe: steps {cfg['steps']}, topk {cfg['topk']}, draft tokens {cfg['num_draft_tokens']} "
                        f"({cfg['flags_source']}), {cfg['responses']} continuations")
    for column in ("prompt", "tokens", "cycles", "mean accept", "off-greedy", "accept lengths"):
        table.add_column(column, justify="left" if column == "accept lengths" else "right")
    for r in result.results:
        mean = sum(r.accept_lengths) / r.num_cycles if r.num_cycles else 0.0
        lengths = " ".join(map(str, r.accept_lengths[:24])) + (" ..." if r.num_cycles > 24 else "")
        off = "-" if r.target_disagreement is None else f"{r.target_disagreement:.1%}"
        table.add_row(str(r.prompt_index), str(r.continuation_tokens), str(r.num_cycles), f"{mean:.2f}", off, lengths)
    console.print(table)
    by_step = "  ".join("-" if p is None else f"{p:.2f}" for p in result.acceptance_by_step)
    console.print(f"mean accept length [bold]{result.mean_accept_length:.3f}[/bold] "
                  f"(teacher-forced, a cycle at every position: {result.per_position_accept_length:.3f})")
    console.print(f"acceptance by draft step: {by_step}")
    console.print(f"accept-length histogram (1..{len(result.accept_length_histogram) - 1}): "
                  f"{' '.join(map(str, result.accept_length_histogram[1:]))}")
    console.print(f"vocabulary bound: {result.vocab_bound:.1%} of continuation tokens are in the draft vocabulary")
    _render_by_context(result, console)
    if result.target_disagreement:
        console.print(f"[yellow]the target disagrees with {result.target_disagreement:.1%} of the given tokens: "
                      "accept lengths describe this text, not what the target would generate[/yellow]")
    if result.skipped_prompts:
        console.print(f"[yellow]skipped {result.skipped_prompts} prompt(s) as long as the target's context[/yellow]")


def _render_by_context(result: ProbeResult, console: Console) -> None:
    """Mean accept length per bucket of cycle start positions, a bucket past a drafter limit in red."""
    if not result.accept_length_by_context:
        return
    parts = []
    for bucket in result.accept_length_by_context:
        text = f"{bucket_label(bucket)}: {bucket['mean_accept_length']:.2f} ({bucket['cycles']})"
        parts.append(f"[red]{text} past {', '.join(bucket['past'])}[/red]" if bucket["past"] else text)
    console.print("accept length by context (cycle start position: mean (cycles)): " + "  ".join(parts))


def _render_estimate(result: ProbeResult, console: Console) -> None:
    cfg = result.config
    by_step = "  ".join("-" if p is None else f"{p:.2f}" for p in result.acceptance_by_step)
    console.print(f"probe estimate at temperature {cfg['temperature']}: steps {cfg['steps']}, topk {cfg['topk']}, "
                  f"draft tokens {cfg['num_draft_tokens']} (top-k drafts, sampled verification), "
                  f"{cfg['responses']} continuations")
    for r in result.results:
        value = "-" if r.expected_accept_length is None else f"{r.expected_accept_length:.3f}"
        console.print(f"  prompt {r.prompt_index}: expected accept length {value} over {r.continuation_tokens} tokens")
    console.print(f"expected accept length [bold]{result.mean_accept_length:.3f}[/bold] (estimate: the target's p of "
                  f"each kept path, along the text); expected acceptance by draft step: {by_step}")
    console.print(f"vocabulary bound: {result.vocab_bound:.1%} of continuation tokens are in the draft vocabulary")
