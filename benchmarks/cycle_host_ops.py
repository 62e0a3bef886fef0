"""Operators the batch-1 speculative cycle dispatches outside its CUDA graphs, counted on the CPU.

    PYTHONPATH=src python benchmarks/cycle_host_ops.py 3/1/4 5/4/8     # the toy pair, seconds

On a GPU the draft, the verify and the draft-extend each replay a CUDA graph; everything else in a
cycle (the walk, ``keep``, the inputs of the next step, the graphs' input copies) is dispatched one
operator at a time by the host, which is time the GPU can spend waiting (session 15's profile: about
0.9 ms of a 6.9 ms 8B cycle). This runs the toy pair's decoder on the static caches without graphs,
marks what a graph would hold (``StaticTarget.step``, ``Eagle3Drafter._static_step`` and the draft,
``SpeculativeDecoder._draft_nodes``), and counts the top-level aten operators outside those marks per
cycle: each is a launch or a host-side tensor operation on a GPU. Metadata operators (views, slices)
are counted too and cost no launch; the list shows which is which.
"""

from __future__ import annotations

import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import draftlab.decode.decoder as decoder_module
import draftlab.models.drafter as drafter_module
import draftlab.models.target_static as target_static
from draftlab.engines.sglang_flags import resolve_spec_flags
from draftlab.models.pair import load_pair
from draftlab.toy import cached_toy_pair

MARK = "captured on a GPU"


def marked(fn):
    def run(*args, **kwargs):
        with record_function(MARK):
            return fn(*args, **kwargs)
    return run


def outside_marks(events) -> collections.Counter:
    counts: collections.Counter = collections.Counter()

    def visit(event, inside: bool) -> None:
        inside = inside or event.name == MARK
        parent = event.cpu_parent
        if not inside and event.name.startswith("aten::") and (parent is None or not parent.name.startswith("aten::")):
            counts[event.name] += 1
        for child in event.cpu_children:
            visit(child, inside)

    for event in events:
        if event.cpu_parent is None:
            visit(event, False)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="+", help="steps/topk/num_draft_tokens")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    target_static.StaticTarget.step = marked(target_static.StaticTarget.step)
    drafter_module.Eagle3Drafter._static_step = marked(drafter_module.Eagle3Drafter._static_step)
    decoder_module.SpeculativeDecoder._draft_nodes = marked(decoder_module.SpeculativeDecoder._draft_nodes)
    toy = cached_toy_pair()
    pair = load_pair(toy.target_dir, toy.drafter_dir, cache="static", max_len=400)
    prompt = list(b"def __init__(self, name, value):\n        self.")
    for config in args.configs:
        decoder = decoder_module.SpeculativeDecoder(pair.target, pair.drafter,
                                                    resolve_spec_flags(*map(int, config.split("/"))))
        list(decoder.stream(prompt, max_new_tokens=args.new_tokens))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            cycles = len(list(decoder.stream(prompt, max_new_tokens=args.new_tokens))) - 1
        counts = outside_marks(prof.events())
        print(f"{config}: {sum(counts.values()) / cycles:.1f} operators per cycle outside the graphs ({cycles} cycles)")
        print("   " + ", ".join(f"{name[6:]} {n / cycles:.1f}" for name, n in counts.most_common(args.top)))


if __name__ == "__main__":
    main()
