"""``draftlab train``'s step against the plain PyTorch TTT step, in one process (issue 27).

GPU (the lead runs this on an H200; about 5 minutes, most of it compiling):
    PYTHONPATH=src python benchmarks/train_floor.py --out $OUT/train_floor.json
CPU smoke run (toy shape, seconds; the plain step needs CUDA and is skipped):
    PYTHONPATH=src python benchmarks/train_floor.py --quick

Rows, each on its own (one that fails prints its error and the others still run):

- ``plain`` at each of ``--plain-seq-lens``: ``benchmarks/anchors/ttt_plain_step.py`` (the project's shared
  anchor, copied unchanged) run through its own ``main()``: an 8B-shaped Llama target online, a bf16
  one-layer drafter unrolled for TTT 7 with SDPA over a block mask, soft-target loss, fused AdamW;
  tokens/s = seq / median step of 5 after 2 warm-up steps, peak memory over those 5 steps. Its model is
  freed before draftlab's is built.
- ``draftlab`` at each of ``--seq-lens``: the trainer's step from the trainer's own functions (the
  target's batched pass with aux capture, ``make_batch``, ``ttt_loss`` with the kernels the trainer
  picks, under bf16 autocast over float32 master weights, backward, clipping at 0.5, ``make_optimizer``)
  for the same shape (``train_speed.build``: hidden 4096, 32 heads, 8 kv heads, MLP 14336, vocabulary
  128256, draft vocabulary 32000, batch 1), timed the same way.
- a profile of one draftlab step at the first length (CUDA kernels by total time), and each draftlab
  row's ``target_forward_s`` (the target's pass alone, which both steps share).
- ``check``: on the same device, the loss and gradients of the trainer's kernels (flex attention and
  compiled layer on CUDA) against the exact blocked eager kernel, float32, a small drafter, 300 rows
  (not a multiple of flex's 128-row blocks) with right padding in one of 2 rows.

The table gives each length's tokens/s and peak GiB, and draftlab's speed and memory as ratios of the
plain step's at the same length (goals: speed >= 1.2x at 2048, memory <= 1.0x at 4096).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import statistics
import time
import traceback
from pathlib import Path

import torch
import train_speed

from draftlab.models.devices import synchronize
from draftlab.train.trainer import make_optimizer
from draftlab.train.ttt import TTTBatch, TTTKernels, make_batch, shift_left, teacher_from_logits, ttt_loss

ANCHOR = Path(__file__).parent / "anchors" / "ttt_plain_step.py"


def plain_row(seq: int, ttt: int) -> dict:
    """The anchor's own main() at ``seq``; its JSON (written to its OUT folder) read back."""
    os.environ["SEQ"], os.environ["TTT"] = str(seq), str(ttt)
    spec = importlib.util.spec_from_file_location("ttt_plain_step", ANCHOR)
    anchor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(anchor)
    anchor.main()
    result = json.loads((anchor.OUT / f"ttt_{seq}_{ttt}.json").read_text())
    return {"tokens_per_second": round(result["tokens_per_s"], 1), "step_s": round(result["step_s"], 4),
            "peak_memory_gib": round(result["peak_gib"], 2), "target_forward_s": round(result["target_fwd_s"], 4)}


def draftlab_step(runner, drafter, t2d, optimizer, params, n: int, ttt: int, kernels: TTTKernels,
                  device: torch.device):
    """One trainer step (the trainer's functions, as ``Trainer._step`` runs them) on random tokens."""
    ids = torch.randint(0, runner.config.vocab_size, (1, n), device=device)
    mask = torch.ones(1, n, dtype=torch.long, device=device)
    mask[:, -1] = 0
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        out = runner.forward_batch(ids, compiled=kernels.compile)  # as Trainer._batch runs it
        batch = make_batch(ids, mask, out.aux, out.hidden, runner.lm_head, t2d)
        with autocast:
            loss = ttt_loss(drafter, batch, ttt, kernels=kernels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        optimizer.step()
    return step


def timed(step, warmup: int, repeats: int, device: torch.device) -> dict:
    """Median step time after ``warmup`` steps, and the peak memory of the timed steps."""
    for _ in range(warmup):
        step()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    row = {"step_s": round(statistics.median(times), 4)}
    if device.type == "cuda":
        row["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return row


def draftlab_rows(args, device: torch.device, kernels_for) -> list[dict]:
    torch.manual_seed(0)
    try:
        runner, drafter, t2d = train_speed.build(args.shape, device)
    except Exception as e:  # noqa: BLE001
        return [_emit({"kind": "draftlab", "seq_len": n, "error": _error(e)}) for n in args.seq_lens]
    kernels = kernels_for(drafter)
    params = [p for p in drafter.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, 1e-5)
    rows = []
    for n in args.seq_lens:
        row = {"kind": "draftlab", "seq_len": n, "attention": kernels.attention, "compile": kernels.compile}
        started = time.perf_counter()
        try:
            step = draftlab_step(runner, drafter, t2d, optimizer, params, n, args.ttt_length, kernels, device)
            row.update(timed(step, args.warmup, args.repeats, device))
            row["tokens_per_second"] = round(n / row["step_s"], 1)
            row["target_forward_s"] = target_forward_s(runner, n, device, kernels.compile)
        except Exception as e:  # noqa: BLE001 - one failed length must not cost the others
            row["error"] = _error(e)
        if args.profile and n == args.seq_lens[0] and device.type == "cuda" and "error" not in row:
            try:
                profile(step)
            except Exception as e:  # noqa: BLE001
                print(f"profile failed: {_error(e)}", flush=True)
        row["wall_s"] = round(time.perf_counter() - started, 1)
        rows.append(_emit(row))
        _free(device)
    return rows


def target_forward_s(runner, n: int, device: torch.device, compiled: bool) -> float:
    """The target's batched pass alone (the step's first part; the plain step runs HF's), mean of 3."""
    ids = torch.randint(0, runner.config.vocab_size, (1, n), device=device)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(3):
        runner.forward_batch(ids, compiled=compiled)
    synchronize(device)
    return round((time.perf_counter() - start) / 3, 4)


def profile(step) -> None:
    """The CUDA kernels of one step by total time, then its operators by host time: where the step's
    time goes, and what keeps the GPU waiting for the host."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as run_profiler

    with run_profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    print(averages.table(sort_by="self_device_time_total", row_limit=25, max_name_column_width=60), flush=True)
    print(averages.table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60), flush=True)


def check_row(device: torch.device, kernels_for) -> dict:
    """Loss and gradients of the trainer's kernels against the blocked eager kernel, float32."""
    from draftlab.checkpoint import DrafterConfig
    from draftlab.models.drafter import Eagle3Drafter

    h, vocab, draft_vocab, b, n, ttt = 64, 97, 40, 2, 300, 3
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": h,
              "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
              "max_position_embeddings": 1024, "vocab_size": vocab, "draft_vocab_size": draft_vocab,
              "target_hidden_size": h, "tie_word_embeddings": False}
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(0)
        drafter = Eagle3Drafter(DrafterConfig.from_dict(config)).to(device)
    drafter.embed_tokens.weight.requires_grad_(False)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[torch.randperm(vocab, generator=g)[:draft_vocab]] = True
    drafter.d2t.copy_((t2d.nonzero()[:, 0] - torch.arange(draft_vocab)).to(device))
    ids = torch.randint(0, vocab, (b, n), generator=g)
    attention = torch.ones(b, n, dtype=torch.bool)
    attention[1, n - 37:] = False
    mask = (torch.rand(b, n, generator=g) < 0.8).long() * attention
    logits = 3 * torch.randn(b, n, vocab, generator=g)
    aux = torch.randn(b, n, 3 * h, generator=g)
    ids, mask, logits, aux, attention, t2d = (t.to(device) for t in (ids, mask, logits, aux, attention, t2d))
    loss_mask = mask[..., None]
    batch = TTTBatch(shift_left(ids), aux, teacher_from_logits(shift_left(logits), t2d, loss_mask), loss_mask,
                     attention)
    kernels = kernels_for(drafter)
    results = {}
    for name, k in (("trainer", kernels), ("blocked", TTTKernels("blocked", False))):
        drafter.zero_grad(set_to_none=True)
        loss = ttt_loss(drafter, batch, ttt, kernels=k).loss
        loss.backward()
        results[name] = (loss.detach(), {p_name: p.grad.clone() for p_name, p in drafter.named_parameters()
                                         if p.grad is not None})
    (loss_a, grads_a), (loss_b, grads_b) = results["trainer"], results["blocked"]
    grad_diff = max(float((grads_a[k] - grads_b[k]).abs().max() / grads_b[k].abs().max().clamp_min(1e-12))
                    for k in grads_b)
    loss_diff = float((loss_a - loss_b).abs() / loss_b.abs())
    return {"kind": "check", "seq_len": n, "attention": kernels.attention, "compile": kernels.compile,
            "loss_rel_diff": loss_diff, "grad_max_rel_diff": grad_diff, "equal": loss_diff < 1e-5 and grad_diff < 1e-4}


def _error(e: BaseException) -> str:
    traceback.print_exc()
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def _emit(row: dict) -> dict:
    print(json.dumps(row), flush=True)
    return row


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def table(rows: list[dict]) -> str:
    plain = {r["seq_len"]: r for r in rows if r["kind"] == "plain" and "error" not in r}
    lines = [f"{'what':<9} {'seq':>6} {'tok/s':>9} {'peak GiB':>9} {'speed vs plain':>15} {'memory vs plain':>16}"]
    for r in rows:
        if r["kind"] == "check":
            kernels = f"{r.get('attention')}{' compiled' if r.get('compile') else ''}"
            state = (f"{kernels} vs blocked eager: loss {r['loss_rel_diff']:.1e}, grads {r['grad_max_rel_diff']:.1e} "
                     f"({'equal' if r['equal'] else 'NOT EQUAL'})") if "error" not in r else r["error"]
            lines.append(f"{'check':<9} {r['seq_len']:>6} {state}")
            continue
        if "error" in r:
            lines.append(f"{r['kind']:<9} {r['seq_len']:>6} {r['error']}")
            continue
        base = plain.get(r["seq_len"]) if r["kind"] == "draftlab" else None
        peak = r.get("peak_memory_gib")
        speed = f"{r['tokens_per_second'] / base['tokens_per_second']:.2f}x" if base else "-"
        memory = f"{peak / base['peak_memory_gib']:.2f}x" if base and peak is not None else "-"
        lines.append(f"{r['kind']:<9} {r['seq_len']:>6} {r['tokens_per_second']:>9.0f} "
                     f"{peak if peak is not None else float('nan'):>9.2f} {speed:>15} {memory:>16}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None, help="default: cuda (cpu with --quick)")
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: toy shape, short lengths, no plain step")
    parser.add_argument("--seq-lens", default=None, help="draftlab's lengths (default 2048,4096,16384)")
    parser.add_argument("--plain-seq-lens", default=None, help="the plain step's lengths (default 2048,4096)")
    parser.add_argument("--ttt-length", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="the drafter layer through torch.compile (default: the trainer's choice, on CUDA)")
    parser.add_argument("--no-check", dest="check", action="store_false", help="skip the exactness check row")
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="skip the kernel profile of one step at the first length (CUDA)")
    parser.add_argument("--out", default=None, help="also write the rows here as JSON")
    args = parser.parse_args()
    device = torch.device(args.device or ("cpu" if args.quick else "cuda"))
    args.shape = "toy" if args.quick else "llama-3.1-8b"
    args.seq_lens = [int(s) for s in (args.seq_lens or ("64,128,300" if args.quick else "2048,4096,16384")).split(",")]
    plain_lens = [int(s) for s in (args.plain_seq_lens or ("" if args.quick else "2048,4096")).split(",") if s]
    if args.quick:
        args.warmup, args.repeats = min(args.warmup, 1), min(args.repeats, 2)

    def kernels_for(drafter) -> TTTKernels:
        return TTTKernels.for_device(device, drafter.midlayer.self_attn.head_dim, args.compile)

    rows = []
    for n in plain_lens:
        row = {"kind": "plain", "seq_len": n}
        try:
            if device.type != "cuda":
                raise RuntimeError("the plain step runs on CUDA only")
            row.update(plain_row(n, args.ttt_length))
        except Exception as e:  # noqa: BLE001
            row["error"] = _error(e)
        rows.append(_emit(row))
        _free(device)
    rows += draftlab_rows(args, device, kernels_for)
    if args.check:
        try:
            rows.append(_emit(check_row(device, kernels_for)))
        except Exception as e:  # noqa: BLE001
            rows.append(_emit({"kind": "check", "seq_len": 300, "error": _error(e)}))
    result = {"shape": args.shape, "ttt_length": args.ttt_length, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(device) if device.type == "cuda"
              else platform.processor() or platform.machine(), "date": time.strftime("%Y-%m-%d"), "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    print(table(rows))


if __name__ == "__main__":
    main()
