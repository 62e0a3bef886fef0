"""Where a batched decoder cycle's time goes: each phase timed with a synchronize on either side.

    python benchmarks/batch_phases.py --device cuda        # Llama-3.1-8B shape, structured weights
    python benchmarks/batch_phases.py --device cpu --model tiny --new-tokens 16
    python benchmarks/batch_phases.py --device cuda --profile prof/   # and torch.profiler op tables

Per config: decodes B prompts the first time this process runs the config (``first_run_cycle_ms``:
what a fresh ``generate`` pays, per-shape set-up included), again over the same lengths (``cycle_ms``),
then a third time with the batched target's and drafter's forward and keep, and the decoder's draft,
walk and extend steps, each timed between synchronizes. The synchronizes cost a little overlap, so the
phases add up to slightly more than ``cycle_ms``. One JSON line per config: milliseconds per cycle.

``--profile DIR`` then decodes prompts of another length twice more under ``torch.profiler`` and
writes each run's op table (by self CPU time) to ``DIR/<config>-{first,again}.txt``: what a first
encounter of new lengths costs (on CUDA, the graphs' capture) that a second does not.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch
from multi_gpu import PredictableWeights, build_drafter, split_target
from runtime_speed import SHAPES
from torch.profiler import ProfilerActivity, profile

from draftlab.decode.batch_decoder import BatchSpeculativeDecoder
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.models.devices import synchronize
from draftlab.models.drafter_batch import BatchDrafter
from draftlab.models.target import TargetRunner
from draftlab.models.target_batch import BatchTarget

SPENT: dict[str, float] = defaultdict(float)


@contextmanager
def timed_phases(device: torch.device):
    """Patch the phases to add their synchronized wall time to SPENT; undo on exit."""
    patched = [(BatchTarget, "forward", "target"), (BatchTarget, "keep", "target keep"),
               (BatchDrafter, "forward", "drafter"), (BatchDrafter, "keep", "drafter keep"),
               (BatchSpeculativeDecoder, "_draft", "draft (incl. drafter)"),
               (BatchSpeculativeDecoder, "_walk", "walk"), (BatchSpeculativeDecoder, "_extend", "extend (incl. drafter)")]
    originals = [(cls, name, cls.__dict__[name]) for cls, name, _ in patched]
    for cls, name, label in patched:
        original = getattr(cls, name)

        def wrapper(*args, _original=original, _label=label, **kwargs):
            synchronize(device)
            start = time.perf_counter()
            out = _original(*args, **kwargs)
            synchronize(device)
            SPENT[_label] += (time.perf_counter() - start) * 1000
            return out
        setattr(cls, name, staticmethod(wrapper) if isinstance(cls.__dict__[name], staticmethod) else wrapper)
    try:
        yield
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)


def timed_run(decoder: BatchSpeculativeDecoder, prompts: list[list[int]], new_tokens: int,
              device: torch.device) -> tuple[float, list]:
    """Milliseconds of one synchronized generate call, and its rows."""
    synchronize(device)
    start = time.perf_counter()
    rows = decoder.generate(prompts, max_new_tokens=new_tokens, ignore_eos=True)
    synchronize(device)
    return (time.perf_counter() - start) * 1000, rows


def profile_runs(decoder: BatchSpeculativeDecoder, prompts: list[list[int]], new_tokens: int,
                 device: torch.device, stem: Path) -> None:
    """Decode ``prompts`` twice under torch.profiler; write each run's op table beside ``stem``."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    for run in ("first", "again"):
        with profile(activities=activities) as prof:
            timed_run(decoder, prompts, new_tokens, device)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        Path(f"{stem}-{run}.txt").write_text(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="llama-3.1-8b", choices=sorted(SHAPES))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--configs", default="0/0/0,2/1/3,3/1/4,6/1/7,5/4/8")
    parser.add_argument("--profile", type=Path, help="write torch.profiler op tables to this folder")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    device = torch.device(args.device)
    cfg = SHAPES[args.model]
    draft_vocab = min(32000, cfg["vocab_size"] // 2)
    values = PredictableWeights(cfg, draft_vocab, residual_scale=1e-3, fixed_points=0.3, seed=0)
    model = split_target(cfg, args.device, dtype, values)
    drafter = build_drafter(model, values, cfg, draft_vocab, dtype)
    target = TargetRunner(model)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, cfg["vocab_size"], (128,), generator=gen).tolist() for _ in range(args.batch_size)]
    profiled = [torch.randint(0, cfg["vocab_size"], (131,), generator=gen).tolist() for _ in range(args.batch_size)]
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    for label in args.configs.split(","):
        steps, topk, n = map(int, label.split("/"))
        flags = exact_spec_flags(steps, topk, n) if steps else None
        decoder = BatchSpeculativeDecoder(target, drafter if steps else None, flags)
        first_ms, rows = timed_run(decoder, prompts, args.new_tokens, device)  # first time: set-up included
        warm_ms, _ = timed_run(decoder, prompts, args.new_tokens, device)  # the same lengths again
        cycles = max(len(r.accept_lengths) for r in rows)
        SPENT.clear()
        with timed_phases(device):
            decoder.generate(prompts, max_new_tokens=args.new_tokens, ignore_eos=True)
        print(json.dumps({"config": label, "cycles": cycles, "first_run_cycle_ms": round(first_ms / cycles, 2),
                          "cycle_ms": round(warm_ms / cycles, 2),
                          **{k: round(v / cycles, 2) for k, v in SPENT.items()}}), flush=True)
        if args.profile:
            profile_runs(decoder, profiled, args.new_tokens, device, args.profile / label.replace("/", "-"))


if __name__ == "__main__":
    main()
