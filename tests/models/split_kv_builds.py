"""Build the split-KV kernels for sm_80 and sm_90 without a GPU (Triton ships ptxas) and print, as JSON,
each build's stack, local and shared memory: what tests/models/test_split_kv.py checks.

    python tests/models/split_kv_builds.py     # TRITON_INTERPRET must be unset
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch

from draftlab.models import split_kv

SMALLEST_SHARED = 99 * 1024  # bytes a block may use on every GPU of compute capability 8.0 on (sm_86, sm_89)
NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def cuobjdump() -> Path | None:
    import triton
    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return path if path.exists() else None


def usage(kernel, pointers: dict[str, str], constants: dict[str, object], capability: int, **options: int) -> dict:
    """Stack and local bytes per thread and shared bytes per block of ``kernel`` built for sm_``capability``
    with these pointer types and constants (every other argument a 32-bit int, ``scale`` a float)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {name: pointers.get(name) or ("constexpr" if name in constants else "fp32" if name == "scale"
                                              else "i32") for name in kernel.arg_names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = triton.compile(ASTSource(kernel, signature, constexprs=constants),
                               target=GPUTarget("cuda", capability, 32), options=options)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(built.asm["cubin"])
        cubin.flush()
        report = subprocess.run([str(cuobjdump()), "-res-usage", cubin.name], capture_output=True, text=True,
                                check=True).stdout
    name = kernel.fn.__name__
    stack, local = re.search(rf"Function {name}:\s+REG:\d+ STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", report).groups()
    return {"kernel": name, "sm": capability, **constants, "stack": int(stack), "local": int(local),
            "shared": built.metadata.shared}


def builds() -> list[dict]:
    """Both kernels at head width 128, for every row tile each dtype allows, as ``attention`` launches them
    over a cache (writing the step's new entries): a bool mask with
    bfloat16, an additive one in the query's dtype otherwise."""
    out = []
    for capability in (80, 90):
        for dtype, most in split_kv.MAX_ROWS.items():
            kind = NAMES[dtype]
            mask = "u8" if dtype == torch.bfloat16 else kind
            rows = 16
            while rows <= most:
                out.append(usage(split_kv._split, {"q": f"*{kind}", "k": f"*{kind}", "v": f"*{kind}",
                                                   "mask": f"*{mask}", "acc_out": "*fp32", "stats_out": "*fp32",
                                                   "new_k": f"*{kind}", "new_v": f"*{kind}", "slots": "*i64"},
                                 {"R": rows, "D": 128, "BLOCK_S": split_kv.BLOCK[dtype],
                                  "BOOL_MASK": mask == "u8", "IEEE": dtype == torch.float32, "APPEND": True},
                                 capability, num_warps=split_kv.NUM_WARPS, num_stages=split_kv.NUM_STAGES))
                out.append(usage(split_kv._merge, {"acc_in": "*fp32", "stats_in": "*fp32", "out": f"*{kind}"},
                                 {"R": rows, "D": 128}, capability))
                rows *= 2
    return out


if __name__ == "__main__":
    print(json.dumps(builds()))
