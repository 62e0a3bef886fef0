"""Kernels one drafter pass runs, eager against compiled (``DRAFTLAB_DRAFTER=compiled``), counted on the CPU.

    PYTHONPATH=src python benchmarks/drafter_pass_kernels.py            # seconds: a toy-sized drafter of each kind

Inside the draft's CUDA graph a drafter pass costs its kernels, and at batch 1 most of them are small
elementwise ones (RMSNorms in float32, RoPE, casts, residual adds, SiLU) that each take a few
microseconds however little they compute. This runs one static-cache step of each kind of drafter
(a draft-extend over 4 target features, a draft pass over a 4-node tree) and counts, inside
``forward_masked`` (the layers and the head; the cache bookkeeping around it is the same both ways):

- eager: the aten operators that compute (views, slices and reshapes of a view are left out);
- compiled: the aten operators still dispatched (the GEMMs, the embedding, attention) plus the fused
  kernels inductor generated (the profiler's ``cpp_fused_*`` events; on CUDA they are Triton kernels,
  fused by the same scheduler).

The counts do not depend on the width or the weights, so a drafter of the toy pairs' sizes
(:mod:`draftlab.toy`) with random weights gives the 8B drafter's.
"""

from __future__ import annotations

import argparse
import collections

import torch
import torch._inductor.config as inductor_config
from torch.profiler import ProfilerActivity, profile, record_function

from draftlab.checkpoint import DrafterConfig
from draftlab.models.drafter import Eagle3Drafter
from draftlab.toy import mla, pair

MARK = "forward_masked"
VIEWS = {"aten::view", "aten::_unsafe_view", "aten::transpose", "aten::unsqueeze", "aten::squeeze", "aten::slice",
         "aten::select", "aten::expand", "aten::as_strided", "aten::t", "aten::split", "aten::split_with_sizes",
         "aten::chunk", "aten::narrow", "aten::alias", "aten::detach", "aten::permute", "aten::unbind",
         "aten::reshape", "aten::lift_fresh", "aten::empty", "aten::empty_strided"}
# the toy drafters' configs (draftlab.toy), built with random weights: the counts do not depend on them
KINDS = {
    "llama": pair.drafter_config_dict(),
    "two layers": {**pair.drafter_config_dict(), "num_hidden_layers": 2},
    "mla (EAGLE-3.1)": mla.drafter_config_dict(mla.target_config().to_dict(), fc_norm=True, norm_output=True),
}


def tiny_drafter(config: dict) -> Eagle3Drafter:
    """A float32 drafter of ``config`` on the CPU, as :meth:`Eagle3Drafter.load` leaves one (weights random)."""
    return Eagle3Drafter(DrafterConfig.from_dict(config)).eval()


def pass_kernels(drafter: Eagle3Drafter, prepare, step) -> collections.Counter:
    """Kernels of ``step(drafter)`` inside forward_masked, by name (each after ``prepare(drafter)``; two
    warm-up runs first)."""
    forward = drafter.forward_masked

    def marked(*args, **kwargs):
        with record_function(MARK):
            return forward(*args, **kwargs)

    drafter.forward_masked = marked
    for _ in range(2):
        prepare(drafter)
        step(drafter)
    prepare(drafter)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(drafter)
    counts: collections.Counter = collections.Counter()

    def visit(event, inside: bool) -> None:
        if inside and event.name.startswith("aten::") and event.name not in VIEWS:
            if event.name != "aten::to" or event.cpu_children:  # a cast to what it already is does nothing
                counts[event.name] += 1
            return  # what an operator calls is its own business
        if inside and "cpp_fused" in event.name:
            counts["fused kernel"] += 1
            return
        for child in event.cpu_children:
            visit(child, inside or event.name == MARK)

    for event in prof.events():
        if event.cpu_parent is None:
            visit(event, False)
    return counts


def empty(drafter: Eagle3Drafter) -> None:
    drafter.reset()


def extend(drafter: Eagle3Drafter) -> None:
    drafter.forward(torch.arange(4), torch.randn(4, drafter.fc.in_features, generator=torch.Generator().manual_seed(0)))


def extended(drafter: Eagle3Drafter) -> None:
    empty(drafter)
    extend(drafter)


def draft(drafter: Eagle3Drafter) -> None:
    tree = torch.tensor([[1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1]], dtype=torch.bool)
    own = torch.randn(4, drafter.config.hidden_size, generator=torch.Generator().manual_seed(1))
    drafter.forward(torch.arange(4), own, positions=torch.tensor([4, 4, 5, 5]), tree_mask=tree)
    drafter.keep(torch.empty(0, dtype=torch.long))


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    inductor_config.cpp.enable_kernel_profile = True
    print("| drafter | pass | eager kernels | compiled: aten + fused = kernels | aten operators left |")
    print("|---|---|---|---|---|")
    with torch.inference_mode():
        for kind, config in KINDS.items():
            for name, prepare, step in (("extend of 4", empty, extend), ("draft of a 4-node tree", extended, draft)):
                eager = pass_kernels(tiny_drafter(config).use_static_cache(64), prepare, step)
                compiled = pass_kernels(tiny_drafter(config).use_static_cache(64, compile=True), prepare, step)
                fused = compiled.pop("fused kernel", 0)
                print(f"| {kind} | {name} | {sum(eager.values())} | {sum(compiled.values())} + {fused} = "
                      f"{sum(compiled.values()) + fused} | {', '.join(sorted(n.removeprefix('aten::') for n in compiled))} |")
                torch._dynamo.reset()  # each kind compiles afresh, as in its own process


if __name__ == "__main__":
    main()
