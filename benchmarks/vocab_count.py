"""Throughput of ``draftlab vocab count`` on plain-text JSONL rows (tokens per second).

Trains a byte-level BPE tokenizer on this Python's standard library sources, writes ``--mb``
megabytes of ``{"text": ...}`` rows cut from the same sources, and times
:func:`draftlab.vocab.count.count_tokens` for each ``--workers`` value (tokenizer loading and
process start-up included, data generation excluded). Runs on CPU; nothing is downloaded.

    python benchmarks/vocab_count.py --mb 64 --vocab 32000 --workers 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from draftlab.vocab.count import count_tokens  # noqa: E402


def stdlib_sources(limit_mb: float) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    texts, size = [], 0
    for path in sorted(root.rglob("*.py")):
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        texts.append(text)
        size += len(text)
        if size > limit_mb * 1e6:
            break
    return texts


def train_tokenizer(folder: Path, texts: list[str], vocab: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(folder)


def write_rows(path: Path, texts: list[str], mb: float, seed: int = 0) -> int:
    rng = random.Random(seed)
    lines = [line for text in texts for line in text.splitlines() if line.strip()]
    written = 0
    with path.open("w") as f:
        while written < mb * 1e6:
            start = rng.randrange(len(lines))
            row = json.dumps({"text": "\n".join(lines[start:start + rng.randint(20, 80)])}) + "\n"
            f.write(row)
            written += len(row)
    return written


def cpu_seconds() -> float:
    """User + system CPU time of this process and its reaped worker processes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=64, help="megabytes of JSONL to count")
    parser.add_argument("--vocab", type=int, default=32000, help="tokenizer vocabulary size")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs per setting")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        texts = stdlib_sources(limit_mb=30)
        train_tokenizer(tmp_path / "tok", texts, args.vocab)
        data = tmp_path / "data.jsonl"
        size = write_rows(data, texts, args.mb)
        print(f"data: {size / 1e6:.1f} MB of text rows; tokenizer: byte-level BPE, {args.vocab} tokens")
        for workers in args.workers:
            best, best_cpu = float("inf"), float("inf")
            for _ in range(args.repeats):
                started, cpu_started = time.perf_counter(), cpu_seconds()
                counts = count_tokens([data], tmp_path / "tok", workers=workers)
                best = min(best, time.perf_counter() - started)
                best_cpu = min(best_cpu, cpu_seconds() - cpu_started)
            n = counts.num_tokens
            print(f"workers={workers}: {n:,} tokens in {best:.2f} s wall = {n / best / 1e6:.2f} M tokens/s "
                  f"({size / 1e6 / best:.1f} MB/s); {best_cpu:.2f} CPU s = {n / best_cpu / 1e6:.2f} M tokens "
                  f"per CPU second; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
