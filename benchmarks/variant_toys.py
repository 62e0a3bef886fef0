"""Accept lengths of the toy drafters of each variant (the exactness tests' fixtures), and of an MLA
drafter trained from scratch for the toy DeepSeek-V3 target: evidence that the fixtures accept drafts.

    PYTHONPATH=src python benchmarks/variant_toys.py

CPU, float32; the prompts of tests/decode/test_variant_exactness.py (6) and tests/decode/test_mla_exact.py (5).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from draftlab.probe.probe import probe
from draftlab.toy import cached_toy_pair
from draftlab.toy.corpus import stdlib_text
from draftlab.toy.mla import cached_mla_toy
from draftlab.toy.variants import VARIANT_FLAGS, cached_variant_drafter
from draftlab.train.trainer import TrainOptions, train

LLAMA_TEXTS = [b"def __init__(self", b"import os\nimport sys\n", b"    return self._", b"for i in range(len(",
               b"class Foo:\n    ", b"if __name__ == "]
MLA_TEXTS = [b"def __init__(self", b"import os\nimport sys\n", b"    return self._", b"for i in range(len(",
             b"class Foo(object):\n    "]
CONFIGS = [(3, 1, 4), (3, 2, 6)]


def prompts(folder: Path, texts: list[bytes]) -> Path:
    path = folder / f"prompts-{len(texts)}.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(t)}) + "\n" for t in texts))
    return path


def row(name: str, target: Path, drafter: Path, path: Path, new: int) -> str:
    means = [probe(target, drafter, path, steps=s, topk=k, num_draft_tokens=n, max_new_tokens=new).mean_accept_length
             for s, k, n in CONFIGS]
    return f"| {name} | " + " | ".join(f"{m:.2f}" for m in means) + " |"


def main() -> None:
    work = Path(tempfile.mkdtemp())
    pair, mla = cached_toy_pair(), cached_mla_toy()
    llama, deepseek = prompts(work, LLAMA_TEXTS), prompts(work, MLA_TEXTS)
    print("| drafter | 3/1/4 | 3/2/6 |\n|---|---|---|")
    print(row("toy Llama, eagle3", pair.target_dir, pair.drafter_dir, llama, 40))
    for name in sorted(VARIANT_FLAGS):
        print(row(f"toy Llama, {name}", pair.target_dir, cached_variant_drafter(pair, name), llama, 40))
    print(row("toy DeepSeek-V3, MLA", mla.target_dir, mla.drafter_dir, deepseek, 32))
    print(row("toy DeepSeek-V3, MLA + EAGLE-3.1", mla.target_dir, mla.eagle31_dir, deepseek, 32))
    text = stdlib_text("train", 200_000)
    data = work / "rows.jsonl"
    data.write_text("".join(json.dumps({"input_ids": list(text[i * 64:(i + 1) * 64])}) + "\n" for i in range(2000)))
    start = time.perf_counter()
    train(TrainOptions(target=mla.target_dir, out=work / "scratch", data=data, max_steps=60, batch_size=16, seq_len=64,
                       lr=3e-3, ttt_length=3, draft_vocab_size=128))
    seconds = time.perf_counter() - start
    print(row(f"toy DeepSeek-V3, MLA from scratch (60 steps, {seconds:.0f} s)", mla.target_dir, work / "scratch",
              deepseek, 32))


if __name__ == "__main__":
    main()
