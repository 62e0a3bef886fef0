"""The batched decoder's tree building, one row at a time against all rows at once.

    PYTHONPATH=src python benchmarks/batch_trees.py                    # CPU, a few seconds
    PYTHONPATH=src python benchmarks/batch_trees.py --device cuda      # a GPU: launch costs included

For each batch size, a cycle's pool (``--config`` steps/topk/num_draft_tokens, random drafter
scores) is turned into trees by :func:`~draftlab.decode.tree.organize_draft_results` once per row (as
the batched decoder did until session 16) and once over the whole batch (as it does now), then the
greedy walks read back per row and once. Prints milliseconds per cycle and the operators each way
dispatches (torch.profiler), which on a GPU are kernel launches.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from draftlab.decode.tree import PoolChunk, organize_draft_results, select_top_k
from draftlab.decode.verify import walk_tree, walk_trees
from draftlab.engines.sglang_flags import resolve_spec_flags


def pool(batch: int, steps: int, topk: int, device: torch.device) -> list[PoolChunk]:
    """A cycle's pool chunks for ``batch`` rows from random draft distributions."""
    gen = torch.Generator(device=device).manual_seed(0)
    chunks, frontier = [], None
    for step in range(steps):
        shape = (batch, topk) if step == 0 else (batch, topk, topk)
        probs = torch.rand(*shape[:-1], 64, generator=gen, device=device).softmax(-1)
        top_p, top_ids = probs.topk(topk, dim=-1)
        frontier, chunk = select_top_k(step, top_p, top_ids, frontier, topk)
        chunks.append(chunk)
    return chunks


def per_row(chunks: list[PoolChunk], roots: list[int], tokens: int, logits: torch.Tensor) -> list:
    trees = [organize_draft_results([PoolChunk(c.scores[i], c.tokens[i], c.parents[i]) for c in chunks],
                                    root, tokens) for i, root in enumerate(roots)]
    return [walk_tree(tree, logits[i], 0.0, None) for i, tree in enumerate(trees)]


def batched(chunks: list[PoolChunk], roots: list[int], tokens: int, logits: torch.Tensor) -> list:
    trees = organize_draft_results(chunks, torch.tensor(roots, device=logits.device), tokens)
    return walk_trees(trees, logits, 0.0, None)


def measure(way, chunks, roots, tokens, logits, device, repeats: int = 20) -> tuple[float, int]:
    """(ms per cycle, operators dispatched per cycle)."""
    way(chunks, roots, tokens, logits)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        way(chunks, roots, tokens, logits)
    ops = sum(1 for e in prof.events() if e.name.startswith("aten::") and e.cpu_parent is None)
    if device.type == "cuda":
        torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(repeats):
        way(chunks, roots, tokens, logits)  # the walks read back, so each cycle ends synchronised
    return (time.perf_counter() - began) / repeats * 1e3, ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--config", default="5/4/8")
    parser.add_argument("--batches", default="1,8,32,64")
    args = parser.parse_args()
    device = torch.device(args.device)
    steps, topk, tokens = (int(v) for v in args.config.split("/"))
    resolve_spec_flags(steps, topk, tokens)  # the engines' rules for the config
    for batch in map(int, args.batches.split(",")):
        chunks = pool(batch, steps, topk, device)
        roots = list(range(batch))
        logits = torch.randn(batch, tokens, 64, device=device)
        assert [(w.nodes, w.tokens) for w in per_row(chunks, roots, tokens, logits)] == \
            [(w.nodes, w.tokens) for w in batched(chunks, roots, tokens, logits)]
        (row_ms, row_ops), (all_ms, all_ops) = (measure(way, chunks, roots, tokens, logits, device)
                                                for way in (per_row, batched))
        print(f"batch {batch:3d}  per row {row_ms:7.2f} ms ({row_ops:5d} ops)  "
              f"batched {all_ms:6.2f} ms ({all_ops:3d} ops)  {row_ms / all_ms:5.1f}x")


if __name__ == "__main__":
    main()
