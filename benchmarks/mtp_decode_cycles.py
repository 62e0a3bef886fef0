"""The MTP head's decode cycles timed the ways assess's profile and its cross-check time them.

On an H100 and an H200 (session 22) assess priced the toy DeepSeek-V3's MTP head at 95-135 tok/s, but its
cross-check decoded it for real at 28-33. The EAGLE-3 drafter beside it agreed within 16%, and on the CPU
the two agreed within 3%. This script found the cause (session 23, RESULTS.md "GPU smoke run"): a first
decode over new key lengths took 34.6 ms per cycle, against 14.1 ms on a second decode. cuDNN's attention
built a plan for every new length in the head's layer. The head now runs without cuDNN: a first decode took
16.9 ms per cycle and a second 17.9 (the next run, on another host). It times, in one process on the same loaded models:

- ``profiler``: the profile's own measure (``runtime_workload(...).mtp_cycles``: random 256-token prompts,
  ``ignore_eos``, the prefill timed alone and taken off);
- ``text``: the cross-check's decode (text prompts, EOS honoured), per cycle with and without the prefill;
- ``text after probe``: the same after ``probe_configs`` ran the head over the prompts, as assess does first;
- ``text after EAGLE-3``: the same after the toy's EAGLE-3 drafter decoded on the same target model (its
  static cache replaying CUDA graphs on CUDA), as assess's cross-check does just before the head's. The head
  runs over the EAGLE-3 pair's target model, as in assess.

    DRAFTLAB_CACHE=$PWD/.smoke-cache PYTHONPATH=src python benchmarks/mtp_decode_cycles.py [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from draftlab.assess.mtp import load_head
from draftlab.cost.model import SpecConfig
from draftlab.cost.runtime_workload import runtime_workload
from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.models.devices import default_dtype, synchronize
from draftlab.models.pair import LoadedPair, load_pair
from draftlab.probe.probe import probe_configs
from draftlab.toy.mtp import cached_mtp_toy
from draftlab.toy.mtp_drafter import cached_mtp_eagle3_drafter

CONFIG = SpecConfig(1, 1, 2)  # the row assess's cross-check decoded
NEW = 128


def text_prompts() -> list[list[int]]:
    """Four byte-level prompts from the standard library's source, as the toy's prompts are."""
    return [list(Path(m.__file__).read_bytes()[400:700]) for m in (argparse, json, statistics, tempfile)]


def text_cycles(decoder: SpeculativeDecoder, device: torch.device, prompts: list[list[int]]) -> dict[str, float]:
    """ms per cycle over ``prompts``, with the prefill (as the cross-check times) and without it."""
    total = prefill = 0.0
    cycles = accepted = 0
    for ids in prompts:
        for new in (1, NEW):
            synchronize(device)
            start = time.perf_counter()
            commits = list(decoder.stream(ids, max_new_tokens=new))
            synchronize(device)
            seconds = time.perf_counter() - start
            if new == 1:
                prefill += seconds
            else:
                total += seconds
                lengths = [c.accept_length for c in commits if c.accept_length is not None]
                cycles, accepted = cycles + len(lengths), accepted + sum(lengths)
    return {"ms_per_cycle_with_prefill": 1000 * total / cycles,
            "ms_per_cycle": 1000 * (total - prefill) / cycles, "accept_length": accepted / cycles}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    toy = cached_mtp_toy()
    # as assess composes them: the EAGLE-3 pair, and the head over that pair's target model
    eagle = load_pair(toy.target_dir, cached_mtp_eagle3_drafter(toy.target_dir), dtype=default_dtype(args.device),
                      device=args.device)
    final, head = load_head(eagle.target, toy.target_dir, "vllm")
    decoder = SpeculativeDecoder(final, head, exact_spec_flags(CONFIG.steps, CONFIG.topk, CONFIG.num_draft_tokens))
    prompts = text_prompts()
    list(decoder.stream(prompts[0], max_new_tokens=8))  # the cross-check's untimed start
    sample = runtime_workload(eagle.target, eagle.drafter, mtp=(final, head)).mtp_cycles(1, CONFIG)
    out = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
           "profiler": {"ms_per_cycle": sample.ms_per_cycle, "accept_length": sample.accept_length},
           "text": text_cycles(decoder, final.device, prompts)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prompts.jsonl"
        path.write_text("".join(json.dumps({"input_ids": ids}) + "\n" for ids in prompts))
        pair = LoadedPair(final, head, [], None)  # type: ignore[arg-type]  # the drafter interface, as assess does
        probe_configs(pair, toy.target_dir, path, [exact_spec_flags(1, 1, 2)], max_new_tokens=NEW)
    out["text after probe"] = text_cycles(decoder, final.device, prompts)
    out["EAGLE-3 text"] = text_cycles(SpeculativeDecoder(eagle.target, eagle.drafter, exact_spec_flags(1, 1, 2)),
                                      final.device, prompts)
    out["text after EAGLE-3"] = text_cycles(decoder, final.device, prompts)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
