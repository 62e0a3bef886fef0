"""Terminal rendering of inspect, check and fix results (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from draftlab.compat.findings import CheckResult
from draftlab.compat.fix import FixResult
from draftlab.compat.summary import DrafterSummary, InspectResult
from draftlab.engines.loading import engine_loading

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{n} B"


def human_count(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def render_inspect(result: InspectResult, console: Console) -> None:
    table = Table(title=f"{result.kind}: {result.path}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    rows: list[tuple[str, Any]] = [
        ("architecture", result.architecture), ("layout", result.layout),
        ("parameters", human_count(result.num_parameters)), ("dtype", result.dtype),
        ("tensors", f"{result.num_tensors} in {result.format} ({human_bytes(result.size_on_disk)})"),
    ]
    if isinstance(result, DrafterSummary):
        engine = f"{engine_loading(result.engine).name} {result.engine_version}"
        aux = result.aux_layers if result.aux_layers is not None else result.aux_default_rule
        d2t = "absent" if not result.has_d2t else ("valid" if result.d2t_valid else "[red]invalid[/]")
        rows += [
            ("weight naming", result.weight_naming), ("hidden size", result.hidden_size),
            ("target hidden size", result.target_hidden_size), ("vocab / draft vocab",
                                                                 f"{result.vocab_size} / {result.draft_vocab_size}"),
            ("decoder layers", result.num_layers),
            (f"aux layers ({engine})", f"{aux}  [dim]from {result.aux_source}[/]"),
            ("max_position_embeddings", result.max_position_embeddings),
            ("rope", f"theta {result.rope_theta}, scaling {result.rope_scaling}"),
            ("d2t / t2d", f"{d2t} / {'present' if result.has_t2d else 'absent'}"),
            ("embed_tokens", "present" if result.has_embed_tokens else "absent (the target's is used)"),
            ("variant", f"{result.variant}: norm_before_fc {result.norm_before_fc}, fc_norm {result.fc_norm}, "
                        f"norm_output {result.norm_output}"),
            ("attention", result.attention if result.attention != "MLA" else
             f"MLA: q_lora_rank {result.q_lora_rank}, kv_lora_rank {result.kv_lora_rank}, qk_nope/rope "
             f"{result.qk_nope_head_dim}/{result.qk_rope_head_dim}, v_head_dim {result.v_head_dim}"),
            ("decoder layer", {"qwen3": "Qwen3 (per-head q_norm/k_norm)", "mla": "DeepSeek MLA"}.get(
                result.decoder_layer, "Llama")),
            ("attention window", ", ".join("full" if w is None else f"sliding {w}" for w in result.sliding_windows)),
            ("drafting", result.drafting),
        ]
        if result.target_mtp is not None:
            rows.append(("target's MTP layers", f"{_mtp_row(result.target_mtp)} [dim](check mtp --target)[/]"))
        rows += [("[red]d2t problem[/]", p) for p in result.d2t_problems]
        rows += [(f"[red]unsupported[/] [dim]{u['field']}[/]", u["message"]) for u in result.unsupported]
        if result.unknown_keys:
            rows.append(("unknown keys [dim](inert)[/]", ", ".join(result.unknown_keys)))
    else:
        moe = result.moe
        rows += [
            ("model type", result.model_type), ("layers", result.num_layers), ("hidden size", result.hidden_size),
            ("vocab size", result.vocab_size), ("context", result.max_position_embeddings),
            ("attention", f"{result.attention}: {result.num_attention_heads} heads, "
                          f"{result.num_key_value_heads} kv heads, head dim {result.head_dim}"),
            ("MoE", "dense" if moe is None else f"{moe['num_experts']} experts, {moe['experts_per_token']} per token, "
                                                f"{moe['num_shared_experts'] or 0} shared, width {moe['moe_intermediate_size']}"),
            ("rope", f"theta {result.rope_theta}, scaling {result.rope_scaling}"),
            ("MTP layers", _mtp_row(result.mtp)),
        ]
    for key, value in rows:
        table.add_row(key, str(value))
    console.print(table)
    if isinstance(result, DrafterSummary):
        console.print(f"aux ids {_aux_reading(result)}")


def _mtp_row(mtp: dict[str, Any] | None) -> str:
    """A target's MTP layers in one line (check mtp --target says which release serves them)."""
    if mtp is None:
        return "none"
    declared = (f"{mtp['num_layers']} ({mtp['count_key']})" if mtp["count_key"] else
                "[yellow]the config declares none[/]")
    return (f"{declared}, {mtp['stored_layers']} stored at {mtp['prefix']}* ({mtp['layout']} layout): "
            f"{mtp['num_tensors']} tensors, {human_count(mtp['num_parameters'])} parameters")


def _aux_reading(result: DrafterSummary) -> str:
    """For which target family the ids were read, and what the others would capture instead."""
    family = {"target": f"read for the given {result.aux_family} target",
              "drafter": "read for a DeepSeek/Kimi target (an MLA drafter)",
              "assumed": "read for a Llama-like target (no --target)"}[result.aux_family_from]
    others = "; ".join(f"a {name} target: {layers}" for name, layers in result.aux_other_readings.items())
    return f"{family}; {others} (pass --target)" if others else family


def render_check(result: CheckResult, console: Console) -> None:
    engine = f"{engine_loading(result.engine).name} {result.engine_version}"
    if str(result.drafter) == "mtp":
        console.print(f"[bold]{engine}[/], drafting with the target's own MTP layers [dim](no aux layers: the "
                      "head reads the target's final hidden state)[/]")
    else:
        console.print(f"[bold]{engine}[/] will capture the outputs of target layers "
                      f"[bold]{result.aux_layers}[/] [dim](from {result.aux_source})[/]")
    if not result.findings:
        console.print("[green]No findings: this pair should load and run correctly.[/]")
        return
    table = Table(show_lines=True, show_header=False, expand=True)
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    for f in result.findings:
        fix = "[green]fix (--fix does it):[/] " if f.fixable else "[dim]fix:[/] "
        table.add_row(f"[{SEVERITY_STYLE[f.severity]}]{f.severity}[/]",
                      f"[bold]{f.code}[/]  [dim]{f.field}[/]\n{f.message}\n{fix}{f.fix}")
    console.print(table)
    verdict = "[green]OK[/]" if result.ok else "[bold red]will not work as is[/]"
    console.print(f"{verdict}: {result.count('error')} errors, {result.count('warning')} warnings, "
                  f"{result.count('info')} notes; {len(result.fixable)} fixable with --fix")


def render_fix(result: FixResult, console: Console) -> None:
    if not result.written:
        console.print(f"[bold]Nothing to fix[/]: no finding is fixable by --fix, so {result.out} was not written")
        return
    console.print(f"[bold]Wrote[/] {result.out}: {len(result.fixed)} findings fixed")
    if result.config_diff:
        console.print(Syntax(result.config_diff, "diff", theme="ansi_dark", background_color="default"))
    for old, new in result.renamed.items():
        console.print(f"  renamed [red]{old}[/] -> [green]{new}[/]")
    if result.renamed:
        console.print("  [dim]tensor bytes copied unchanged, only the names in the header differ[/]")
    console.print(f"[bold]check on {result.out}:[/]")
    render_check(result.after, console)
