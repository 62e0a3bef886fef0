"""Compiled against eager layer math in bfloat16: does inductor's ``emulate_precision_casts`` make the
fused layer's compiled elementwise parts round as the eager ones do (issue 27's compiled verify)?

    PYTHONPATH=src python benchmarks/compile_numerics.py                          # H200: the 8B shape
    PYTHONPATH=src python benchmarks/compile_numerics.py --device cpu --tiny      # checks the script

Why: compiling the batch-1 verify's layer parts took the 8B verify from 9.3 to 7.8 ms on an H200, but in
bfloat16 the toy pair's probe then matched ``generate`` on 6 of 8 prompts instead of 8 (RESULTS.md, GPU
smoke run, session 12). Inductor fuses a chain of bf16 ops and keeps the intermediates in float32, while
eager rounds after every op; ``emulate_precision_casts`` asks inductor to round where eager does. On the
CPU (torch 2.13) the compiled parts then equal eager bit for bit (default: about 60% of the elements
differ). On CUDA, Triton's reductions (the RMSNorm's mean) may still sum in another order.

For :func:`~draftlab.models.fused_layer.attention_input` and
:func:`~draftlab.models.fused_layer.layer_output` over random inputs of the shape's width, at each
``--rows`` count (a batch-1 decode, a verify, a batch-64 decode), prints per output: the elements that
differ from eager and the largest difference, compiled with inductor's defaults and with the emulation.
"""

from __future__ import annotations

import argparse
import json

import torch

from draftlab.models.fused_layer import attention_input, layer_output

SHAPES = {"llama-3.1-8b": {"hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "intermediate": 14336},
          "tiny": {"hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64, "intermediate": 512}}
WAYS = {"default": {}, "emulate_precision_casts": {"emulate_precision_casts": True}}


def inputs(shape: dict, rows: int, device: torch.device, gen: torch.Generator) -> tuple[tuple, tuple]:
    """Arguments of attention_input and of layer_output for ``rows`` tokens, bf16, weights scaled as trained
    layers' are (unit-variance activations)."""
    h, heads, kv, d, inter = (shape[k] for k in ("hidden", "heads", "kv_heads", "head_dim", "intermediate"))

    def rand(*size: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*size, generator=gen) * scale).to(device, torch.bfloat16)

    hidden, cos, sin = rand(1, rows, h), rand(1, rows, d), rand(1, rows, d)
    norm = (1 + 0.1 * torch.randn(h, generator=gen)).to(device, torch.bfloat16)
    first = (hidden, norm, 1e-5, rand((heads + 2 * kv) * d, h, scale=h ** -0.5), None, None, None, 0.0, cos, sin,
             heads, kv, d)
    last = (hidden, rand(1, rows, heads * d), rand(h, heads * d, scale=(heads * d) ** -0.5), None, norm, 1e-5,
            rand(2 * inter, h, scale=h ** -0.5), None, rand(h, inter, scale=inter ** -0.5), None)
    return first, last


def compare(want: tuple[torch.Tensor, ...], got: tuple[torch.Tensor, ...]) -> list[dict]:
    return [{"differ": int((g != w).sum()), "of": w.numel(), "max_abs_diff": float((g.float() - w.float()).abs().max())}
            for w, g in zip(want, got)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a tiny layer (CPU check of the script)")
    parser.add_argument("--rows", default="1,4,64", help="token counts, comma separated")
    args = parser.parse_args()
    device = torch.device(args.device)
    shape = SHAPES["tiny" if args.tiny else "llama-3.1-8b"]
    compiled = {(fn.__name__, way): torch.compile(fn, fullgraph=True, dynamic=False, options=options)
                for fn in (attention_input, layer_output) for way, options in WAYS.items()}
    gen = torch.Generator().manual_seed(0)
    print(f"| function | rows | output | {' | '.join(WAYS)} |\n|---|---|---|" + "---|" * len(WAYS))
    for rows in (int(r) for r in args.rows.split(",")):
        first, last = inputs(shape, rows, device, gen)
        for fn, fn_args in ((attention_input, first), (layer_output, last)):
            want = fn(*fn_args)
            want = want if isinstance(want, tuple) else (want,)
            results = {}
            for way in WAYS:
                got = compiled[fn.__name__, way](*fn_args)
                results[way] = compare(want, got if isinstance(got, tuple) else (got,))
            print(json.dumps({"function": fn.__name__, "rows": rows, **results}), flush=True)
            for i in range(len(want)):
                cells = [f"{r[i]['differ']}/{r[i]['of']} (max {r[i]['max_abs_diff']:.3g})" for r in results.values()]
                print(f"| {fn.__name__} | {rows} | {i} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
