"""How well ``draftlab plan`` predicts the tokens per second ``draftlab generate`` then measures.

GPU (H200):
    python benchmarks/plan_accuracy.py --device cuda --model llama-3.1-8b
    python benchmarks/plan_accuracy.py --device cuda --model toy --toy-dir TOY   # trained pair: real acceptance
CPU smoke run:
    python benchmarks/plan_accuracy.py --device cpu --model tiny --prompts 2 --new-tokens 16 --batch-sizes 1,2

For every batch size: profile the passes and the decoder's own per-cycle work (timed on the
calibration configs 1/1/2, 4/1/5 and 4/4/8, which the tested configs avoid) on this machine exactly as
``draftlab profile`` does (``runtime_workload`` + ``profile_costs``; batch 1 on generate's fastest
runtime, static caches and CUDA graphs on CUDA; larger batches on the batched runtime), probe each config's accept length on the
continuations generate produced (``probe_sequences``), predict with ``make_plan``, then decode the same
prompts with generate's decoders (``SpeculativeDecoder`` one prompt at a time, ``BatchSpeculativeDecoder``
in groups of B) and time them as generate does: generated tokens over decoding wall time, prefill included.

The plan's tokens per second assume every row of the batch busy every cycle, as in a server that
refills a finished row at once (``predicted_tps``). Generate's batches are static: a batch runs until
its slowest row is done, so its throughput is set by the rows that accept least. The comparison
therefore also predicts generate's own throughput from the same cycle time and the probe's per-prompt
cycle counts (``predicted_static_tps``, the ``error`` column), and measures the cycle as decoding wall
time over the batches' cycles (``measured_cycle_ms``).
The models are built in memory (random bf16 weights from the Llama-3.1-8B config, by default arranged so
that drafts are accepted as in benchmarks/multi_gpu.py; or the trained toy pair read from --toy-dir), so
generate's loading step is skipped; everything after loading is generate's code.
Prints one JSON line per (batch, config) and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict

import torch
from multi_gpu import PredictableWeights, build_drafter, split_target
from runtime_speed import SHAPES, build

from draftlab.cost.model import SpecConfig
from draftlab.cost.plan import GridEntry, make_plan
from draftlab.cost.probes import AcceptLength
from draftlab.cost.profiler import profile_costs
from draftlab.cost.runtime_workload import runtime_workload
from draftlab.decode.batch_decoder import BatchSpeculativeDecoder
from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.models.devices import synchronize
from draftlab.models.target import TargetRunner
from draftlab.probe.probe import probe_sequences

CONFIGS = "2/1/3,3/1/4,5/1/6,6/1/7,3/4/8,5/4/8"  # none of them the overhead's calibration chains


def load_models(args: argparse.Namespace, dtype: torch.dtype):
    if args.model == "toy":
        from draftlab.models.pair import load_pair

        pair = load_pair(f"{args.toy_dir}/target", f"{args.toy_dir}/drafter", dtype=args.dtype, device=args.device,
                         cache="dynamic")
        return pair.target.model, pair.drafter, pair.target.aux_layers
    if args.weights == "plain":
        model, drafter = build(args.model, args.device, dtype)
        return model, drafter, None
    cfg = SHAPES[args.model]
    draft_vocab = min(32000, cfg["vocab_size"] // 2)
    values = PredictableWeights(cfg, draft_vocab, residual_scale=1e-3, fixed_points=0.3, seed=0)
    model = split_target(cfg, args.device, dtype, values)  # one GPU: no split, no hooks
    return model, build_drafter(model, values, cfg, draft_vocab, dtype), None


def batch_cycles(lengths: list[list[int]], batch: int) -> int:
    """Cycles that static batches of ``batch`` prompts run, given each prompt's accept lengths (one
    per cycle): a batch runs until its slowest row is done, its finished rows riding along."""
    return sum(max(map(len, lengths[i:i + batch])) for i in range(0, len(lengths), batch))


def decode(decoder, prompts: list[list[int]], batch: int, new_tokens: int, device: torch.device):
    """Generate's loop and clock: outputs, per-prompt accept lengths, seconds."""
    outputs, lengths, elapsed = [], [], 0.0
    for first in range(0, len(prompts), batch):
        group = prompts[first:first + batch]
        synchronize(device)
        start = time.perf_counter()
        if batch == 1:
            commits = list(decoder.stream(group[0], max_new_tokens=new_tokens, ignore_eos=True))
            rows = [([t for c in commits for t in c.tokens], [c.accept_length for c in commits
                                                               if c.accept_length is not None])]
        else:
            rows = [(r.output_ids, r.accept_lengths)
                    for r in decoder.generate(group, max_new_tokens=new_tokens, ignore_eos=True)]
        synchronize(device)
        elapsed += time.perf_counter() - start
        outputs += [o for o, _ in rows]
        lengths += [a for _, a in rows]
    return outputs, lengths, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="llama-3.1-8b", choices=["llama-3.1-8b", "tiny", "toy"])
    parser.add_argument("--toy-dir", help="folder with target/ and drafter/ of the trained toy pair")
    parser.add_argument("--weights", default="structured", choices=["structured", "plain"],
                        help="random weights arranged so that drafts are accepted (multi_gpu.PredictableWeights), "
                             "or plain random ones (accept length 1)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--configs", default=CONFIGS)
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--measure-repeats", type=int, default=3,
                        help="decode the prompts this many times per config; the median time counts")
    parser.add_argument("--overhead-ms", type=float, default=0.0)
    args = parser.parse_args()
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[args.dtype]
    device = torch.device(args.device)
    configs = [SpecConfig.parse(c) for c in args.configs.split(",")]
    batches = [int(b) for b in args.batch_sizes.split(",")]
    torch.manual_seed(0)
    model, drafter, layers = load_models(args, dtype)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, vocab, (args.prompt_len,), generator=gen).tolist() for _ in range(args.prompts)]
    if args.model == "toy":  # readable byte prompts: a trained pair accepts on real text
        import inspect

        text = inspect.getsource(torch.nn.modules.module).encode()[:200_000]
        step = len(text) // args.prompts
        prompts = [list(text[i * step: i * step + args.prompt_len]) for i in range(args.prompts)]

    max_len = max(args.prompt_len, args.prompt_len // 2 + 256) + args.new_tokens + 64
    target = TargetRunner(model, aux_layers=layers, max_len=max_len)  # static + graphs on CUDA, as load_pair
    if target.max_len is not None:
        drafter.use_static_cache(max_len)
    verify_tokens = sorted({1, *(c.num_draft_tokens for c in configs)})
    rows_needed = sorted({c.topk for c in configs})
    extend = list(range(1, max(c.steps for c in configs) + 2))
    work = runtime_workload(target, drafter, context_tokens=args.prompt_len + args.new_tokens // 2)
    profile = profile_costs(work, batch_sizes=batches, verify_tokens=verify_tokens, draft_rows=rows_needed,
                            extend_tokens=extend, repeats=args.repeats, overhead_ms=args.overhead_ms)
    print(json.dumps({"environment": profile.environment, "model": args.model, "dtype": args.dtype,
                      "batch_sizes": batches, "prompts": args.prompts, "prompt_len": args.prompt_len,
                      "new_tokens": args.new_tokens, "weights": args.weights, "target_cache": target.cache,
                      "hf_device_map": getattr(model, "hf_device_map", None),
                      "overhead": [asdict(o) for o in profile.overhead],
                      "decode_pass_ms": {m.batch_size: round(m.median_ms, 3) for m in profile.verify
                                         if m.tokens == 1}}), flush=True)

    for b in batches:  # cross-checks of the decode step: the pass by wall clock, and the decoder's own step
        walls = []
        with torch.inference_mode():
            run = work.verify(b, 1)
            for i in range(13):
                synchronize(device)
                start = time.perf_counter()
                run()
                synchronize(device)
                walls.append((time.perf_counter() - start) * 1000)
            plain = work.cycles(b, None)
        print(json.dumps({"batch": b, "decode_pass_wall_ms": round(sorted(walls[3:])[5], 3),
                          "decoder_plain_step_ms": round(plain.ms_per_cycle, 3)}), flush=True)
    for section in ("verify", "draft_step", "draft_extend"):
        print(json.dumps({section: [(m.batch_size, m.tokens, round(m.median_ms, 3)) for m in getattr(profile, section)]}))

    table = []
    for b in batches:
        measured, spread = {}, {}
        for config in [None, *configs]:
            flags = None if config is None else exact_spec_flags(config.steps, config.topk, config.num_draft_tokens)
            draft = None if config is None else drafter
            decoder = SpeculativeDecoder(target, draft, flags) if b == 1 \
                else BatchSpeculativeDecoder(target, draft, flags)
            # warm-up (graph capture, allocator); a batched decoder keeps its caches, and their graphs,
            # only for calls that fit them, so it warms up at the measured length
            decode(decoder, prompts[:b], b, 8 if b == 1 else args.new_tokens, device)
            runs = [decode(decoder, prompts, b, args.new_tokens, device) for _ in range(args.measure_repeats)]
            outputs, lengths, _ = runs[0]
            if any(run[0] != outputs for run in runs):
                raise SystemExit(f"batch {b}, {config}: repeated decodes gave different tokens")
            measured[config] = (sum(map(len, outputs)) / statistics.median(run[2] for run in runs), outputs, lengths)
            spread[config] = [round(sum(map(len, outputs)) / run[2], 1) for run in runs]
        probes = []
        for config in configs:
            flags = exact_spec_flags(config.steps, config.topk, config.num_draft_tokens)
            outputs, lengths = measured[config][1], measured[config][2]
            extra = [o + [0] * (config.steps + 1) for o in outputs]  # look-ahead the last cycle needs
            result = probe_sequences(target, drafter, prompts, extra, flags, max_new_tokens=args.new_tokens)
            probes.append(AcceptLength(config, result.mean_accept_length, "probe", batch_size=b))
            same = sum(r.accept_lengths[:-1] == g[:-1] for r, g in zip(result.results, lengths))
            measured[config] += (same, batch_cycles([r.accept_lengths for r in result.results], b))
        plan = make_plan(profile, probes, grid=[GridEntry(c) for c in configs], batch_sizes=[b])
        base_measured = measured[None][0]
        for row in plan.configs:
            config = SpecConfig(row.steps, row.topk, row.num_draft_tokens)
            tps, outputs, lengths, same, probe_cycles = measured[config]
            generate_al = sum(map(sum, lengths)) / max(1, sum(map(len, lengths)))
            tokens = sum(map(len, outputs))
            static_tps = tokens * 1000 / (probe_cycles * row.cycle_ms)
            entry = {
                "batch": b, "config": config.label, "probe_accept_length": round(row.accept_length, 3),
                "generate_accept_length": round(generate_al, 3), "prompts_matching": same,
                "predicted_cycle_ms": round(row.cycle_ms, 2),
                "measured_cycle_ms": round(tokens * 1000 / tps / batch_cycles(lengths, b), 2),
                "predicted_tps": round(row.tokens_per_second, 1),
                "predicted_static_tps": round(static_tps, 1), "measured_tps": round(tps, 1),
                "measured_tps_runs": spread[config],
                "error": round(static_tps / tps - 1, 4),
                "every_row_busy_error": round(row.tokens_per_second / tps - 1, 4),
                "predicted_baseline_tps": round(plan.baseline_tokens_per_second[b], 1),
                "measured_baseline_tps": round(base_measured, 1),
            }
            print(json.dumps(entry), flush=True)
            table.append(entry)
    print("\n| batch | config | accept length (probe / generate) | cycle ms predicted / measured "
          "| tok/s predicted: every row busy / static batches | tok/s measured | error (static) |")
    print("|---|---|---|---|---|---|---|")
    for e in table:
        print(f"| {e['batch']} | {e['config']} | {e['probe_accept_length']:.2f} / {e['generate_accept_length']:.2f} "
              f"| {e['predicted_cycle_ms']:.2f} / {e['measured_cycle_ms']:.2f} | {e['predicted_tps']:.1f} / "
              f"{e['predicted_static_tps']:.1f} | {e['measured_tps']:.1f} | {e['error']:+.1%} |")
    for b in batches:
        e = next(e for e in table if e["batch"] == b)
        print(f"baseline batch {b}: predicted {e['predicted_baseline_tps']:.1f} tok/s, "
              f"measured {e['measured_baseline_tps']:.1f} tok/s")


if __name__ == "__main__":
    main()
