"""Speed of one ``draftlab train`` step with the target online: tokens/s, MFU and peak memory.

GPU (the lead runs this on an H200):
    PYTHONPATH=src python benchmarks/train_speed.py --device cuda --out train_speed.json
CPU smoke run (seconds):
    PYTHONPATH=src python benchmarks/train_speed.py --device cpu --shape toy --seq-lens 64,128 --out /tmp/train_speed.json

Models: a Llama-3.1-8B-shaped target with random bf16 weights built from its config (no download),
and a from-scratch EAGLE-3 drafter for it (the config ``draftlab train`` derives: one layer of the
target's sizes, draft vocabulary 32000, aux layers [1, 15, 28]) with float32 master weights. One
step is what the trainer's step is, from the same functions: the target's batched pass with aux
capture (``TargetRunner.forward_batch``), the teacher from its final hidden states (``make_batch``),
the TTT loss over ``--ttt-length`` steps (``ttt_loss``, with the kernels the trainer picks) under bf16
autocast on CUDA, backward, gradient clipping and AdamW (``make_optimizer``). Random weights change nothing in the step's cost.

MFU = counted FLOPs / step time / ``--peak-tflops`` (790: the measured dense bf16 peak of one H200).
Counted: target forward (2 x non-embedding parameters x tokens + causal attention 2 n^2 H per layer +
the full-vocabulary lm_head the teacher needs), the drafter's fc once, and per TTT step its layer and
lm_head (2 x parameters x tokens + causal attention), forward and backward counted as 3x forward.
The diagonal terms of earlier TTT steps (O(n) each) are ignored, and so are attention positions the
causal mask discards (the flex kernel skips most of them; the n x n formulation before issue 27
computed them all). ``benchmarks/train_floor.py`` compares the step with a plain PyTorch one.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import transformers as tf

from draftlab.checkpoint import DrafterConfig, TargetConfig
from draftlab.checkpoint.synth import specforge_drafter_config
from draftlab.engines import default_aux_layers
from draftlab.models.devices import synchronize
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner
from draftlab.train.setup import with_aux_ids
from draftlab.train.trainer import make_optimizer
from draftlab.train.ttt import make_batch, ttt_loss

SHAPES = {
    "llama-3.1-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                         rope_theta=500000.0, draft_vocab=32000),
    "toy": dict(vocab_size=260, hidden_size=64, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=4096, rope_theta=10000.0, draft_vocab=128),
}


def build(shape: str, device: torch.device) -> tuple[TargetRunner, Eagle3Drafter, torch.Tensor]:
    cfg = dict(SHAPES[shape])
    draft_vocab = cfg.pop("draft_vocab")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with torch.device(device):
        model = tf.LlamaForCausalLM._from_config(tf.LlamaConfig(**cfg, architectures=["LlamaForCausalLM"]),
                                                 dtype=dtype)
    target_cfg = TargetConfig.from_dict({**model.config.to_dict(), "architectures": ["LlamaForCausalLM"]})
    aux = default_aux_layers(cfg["num_hidden_layers"]) if shape != "toy" else [0, 1, 2]
    runner = TargetRunner(model, aux_layers=aux, cache="dynamic")
    runner.embed_tokens.weight.requires_grad_(False)
    config = with_aux_ids(specforge_drafter_config(target_cfg, draft_vocab_size=draft_vocab,
                                                   intermediate_size=cfg["intermediate_size"],
                                                   target_hidden_size=cfg["hidden_size"]), aux, target_cfg)
    with torch.device(device):
        drafter = Eagle3Drafter(DrafterConfig.from_dict(config), embed_tokens=runner.embed_tokens)
    drafter.place(torch.float32, device, keep_embedding=True).train()
    ids = torch.randperm(cfg["vocab_size"], generator=torch.Generator().manual_seed(0))[:draft_vocab].sort().values
    drafter.d2t.copy_(ids - torch.arange(draft_vocab))
    t2d = torch.zeros(cfg["vocab_size"], dtype=torch.bool)
    t2d[ids] = True
    return runner, drafter, t2d.to(device)


def step_flops(shape: str, batch: int, n: int, ttt: int) -> float:
    c = SHAPES[shape]
    h, inter, layers, v, vd = (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"],
                               c["draft_vocab"])
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    tokens = batch * n
    attn_params = h * (h + 2 * kv) + h * h
    target = layers * (2 * tokens * (attn_params + 3 * h * inter) + 2 * batch * n * n * h) + 2 * tokens * h * v
    draft_layer = 2 * h * (h + 2 * kv) + h * h + 3 * h * inter + h * vd  # q/k/v take 2H inputs
    draft_fwd = 2 * tokens * 3 * h * h + ttt * (2 * tokens * draft_layer + 2 * batch * n * n * h)
    return target + 3 * draft_fwd


def make_step(runner, drafter, t2d, optimizer, params, batch: int, n: int, ttt: int, device: torch.device):
    vocab = runner.config.vocab_size
    ids = torch.randint(0, vocab, (batch, n), device=device)
    mask = torch.ones(batch, n, dtype=torch.long, device=device)
    mask[:, -1] = 0
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast(
        "cpu", enabled=False)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        out = runner.forward_batch(ids)
        data = make_batch(ids, mask, out.aux, out.hidden, runner.lm_head, t2d)
        with autocast:
            loss = ttt_loss(drafter, data, ttt).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        optimizer.step()
        return float(loss.detach())
    return step


def measure(runner, drafter, t2d, args, n: int, device: torch.device) -> dict:
    params = [p for p in drafter.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, 1e-5)
    step = make_step(runner, drafter, t2d, optimizer, params, args.batch_size, n, args.ttt_length, device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        for _ in range(args.warmup):
            step()
        times = []
        for _ in range(args.repeats):
            synchronize(device)
            start = time.perf_counter()
            step()
            synchronize(device)
            times.append(time.perf_counter() - start)
    except torch.OutOfMemoryError:
        return {"seq_len": n, "oom": True}
    seconds = statistics.median(times)
    flops = step_flops(args.shape, args.batch_size, n, args.ttt_length)
    row = {"seq_len": n, "batch_size": args.batch_size, "step_s": round(seconds, 4),
           "tokens_per_second": round(args.batch_size * n / seconds, 1), "tflop_per_step": round(flops / 1e12, 3),
           "mfu": round(flops / seconds / (args.peak_tflops * 1e12), 4)}
    if device.type == "cuda":
        row["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    del optimizer
    return row


def table(rows: list[dict]) -> str:
    lines = [f"{'seq':>6} {'step s':>8} {'tok/s':>10} {'TFLOP':>8} {'MFU':>6} {'peak GiB':>9}"]
    for r in rows:
        if r.get("oom"):
            lines.append(f"{r['seq_len']:>6} out of memory")
            continue
        lines.append(f"{r['seq_len']:>6} {r['step_s']:>8.3f} {r['tokens_per_second']:>10.0f} "
                     f"{r['tflop_per_step']:>8.2f} {r['mfu']:>6.1%} {r.get('peak_memory_gib', float('nan')):>9.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.1-8b")
    parser.add_argument("--seq-lens", default="512,1024,2048,4096")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--ttt-length", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--peak-tflops", type=float, default=790.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    runner, drafter, t2d = build(args.shape, device)
    rows = []
    for n in args.seq_lens.split(","):  # one line per length as it lands: a cut-off run keeps what it measured
        rows.append(measure(runner, drafter, t2d, args, int(n), device))
        print(json.dumps(rows[-1]), flush=True)
    result = {"shape": args.shape, "device": torch.cuda.get_device_name(device) if device.type == "cuda"
              else platform.processor() or platform.machine(), "torch": torch.__version__,
              "ttt_length": args.ttt_length, "draft_vocab": SHAPES[args.shape]["draft_vocab"],
              "peak_tflops": args.peak_tflops, "date": time.strftime("%Y-%m-%d"), "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(table(rows))


if __name__ == "__main__":
    main()
