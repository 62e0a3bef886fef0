"""How long the model-free baselines (probe/modelfree.py) take on 64 prompts x 256 tokens.

    PYTHONPATH=src python benchmarks/modelfree_speed.py

Texts are random tokens with copied spans (the baselines' matching has work to do); each method
runs over 64 prompts of 256 tokens and 256 continuation tokens; the median of 3 runs is printed.
"""

from __future__ import annotations

import random
import statistics
import time

from draftlab.probe.modelfree import Ngram, Suffix, SuffixCache, assess


def texts(count: int, length: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        text: list[int] = []
        while len(text) < length:
            if text and rng.random() < 0.5:
                start = rng.randrange(len(text))
                text += text[start:start + rng.randint(1, 8)]
            else:
                text.append(rng.randrange(1000))
        out.append(text[:length])
    return out


def main() -> None:
    rows = texts(64, 512)
    prompts, continuations = [t[:256] for t in rows], [t[256:] for t in rows]
    methods = {"ngram 1-3, k=4": lambda: Ngram(1, 3, 4).start, "ngram 2-5, k=8": lambda: Ngram(2, 5, 8).start,
               "suffix (vLLM defaults)": lambda: SuffixCache(Suffix()).start}
    for name, make in methods.items():
        seconds = []
        for _ in range(3):
            start = time.perf_counter()
            result = assess(prompts, continuations, make(), 256)
            seconds.append(time.perf_counter() - start)
        print(f"{name}: {statistics.median(seconds) * 1000:.0f} ms (mean accept length {result.mean_accept_length:.2f})")


if __name__ == "__main__":
    main()
