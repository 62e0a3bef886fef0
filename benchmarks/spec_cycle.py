"""Speculative cycle cost of draftlab's reference decoder: draft, verify and draft-extend timed
separately, against plain decoding with the same code.

Target: a Llama-3.1-8B-shaped model with random weights built from its config on the device (no
download); drafter: a matching EAGLE-3 drafter (hidden 4096, 32k draft vocabulary), random too.
Random weights accept almost nothing, so the tokens/s measured here are at accept length ~1; the
script also prints the break-even accept length (cycle time / plain decode step time): a trained
drafter pays off when its mean accept length is above it.

The decoder is the one ``generate`` runs at batch 1, set up as ``load_pair`` sets it up (the target's
static cache and CUDA graphs on CUDA, and a static drafter cache beside it), both caches sized as
``generate`` sizes them (``max_cache_len``: the prompt, the new tokens and one cycle). Each cycle is also put
against the floor of its parts (issue 27): the verify reads the target's weights and the KV cache
filled so far once, and each of the ``steps`` drafter passes (the extend over the accepted tokens,
then ``steps - 1`` draft passes) reads the drafter's own weights once (the embedding is the target's,
gathered by rows); floor = those bytes over the device-to-device copy bandwidth measured in the same
run. The plain step's floor is the target's read alone.

    python benchmarks/spec_cycle.py --device cuda --dtype bfloat16
    python benchmarks/spec_cycle.py --device cpu --tiny          # a few seconds, checks the script
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from decode_profile import copy_bandwidth  # noqa: E402

from draftlab.checkpoint import DrafterConfig  # noqa: E402
from draftlab.decode.decoder import SpeculativeDecoder, max_cache_len  # noqa: E402
from draftlab.documents import provenance  # noqa: E402
from draftlab.engines.sglang_flags import resolve_spec_flags  # noqa: E402
from draftlab.models.devices import parse_device, parse_dtype, synchronize  # noqa: E402
from draftlab.models.drafter import Eagle3Drafter  # noqa: E402
from draftlab.models.kernels import drafter_compile_chosen  # noqa: E402
from draftlab.models.target import TargetRunner  # noqa: E402

LLAMA_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                rope_theta=500000.0, rms_norm_eps=1e-5,
                rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5)


def build_pair(shape: dict, draft_vocab: int, dtype: torch.dtype, device: torch.device, max_len: int,
               compile_verify: bool = False, cache: str = "auto"):
    """The random pair, its static caches (on CUDA) holding ``max_len`` entries, as ``generate`` sizes them;
    ``compile_verify``: the target's bucketed steps with their layer parts compiled (``generate``'s
    choice for a long decode), and the drafter's with ``DRAFTLAB_DRAFTER=compiled``."""
    config = LlamaConfig(**shape, tie_word_embeddings=False)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    layers = shape["num_hidden_layers"]
    target = TargetRunner(model, aux_layers=[1, layers // 2 - 1, layers - 4], cache=cache, max_len=max_len,
                          compile=compile_verify)
    drafter_cfg = DrafterConfig.from_dict({
        "architectures": ["LlamaForCausalLMEagle3"], **{k: v for k, v in shape.items() if k != "num_hidden_layers"},
        "num_hidden_layers": 1, "draft_vocab_size": draft_vocab, "target_hidden_size": shape["hidden_size"],
    })
    drafter = Eagle3Drafter(drafter_cfg, embed_tokens=target.embed_tokens)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if not name.startswith("embed_tokens") and p.dim() == 2:
                p.normal_(0.0, p.shape[1] ** -0.5)
    drafter = drafter.place(dtype, device, keep_embedding=True).eval()
    if target.max_len is not None:  # as load_pair: a static target gets a static drafter cache
        drafter.use_static_cache(target.max_len, compile=compile_verify and drafter_compile_chosen())
    return target, drafter


class PhaseTimer:
    """Wraps the decoder's phase methods; synchronises the device around each call."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.totals, self.counts = device, defaultdict(float), defaultdict(int)

    def wrap(self, fn, name: str):
        def timed(*args, **kwargs):
            synchronize(self.device)
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            synchronize(self.device)
            self.totals[name] += time.perf_counter() - start
            self.counts[name] += 1
            return out
        return timed

    def ms(self, name: str) -> float:
        return 1000 * self.totals[name] / max(self.counts[name], 1)


def run(decoder: SpeculativeDecoder, prompt: list[int], new_tokens: int, device: torch.device,
        phases: bool = False) -> dict:
    """Time one generation (the prefill excluded). ``phases``: also each phase's mean, the device
    synchronised around it, which takes away the overlap of one phase's host work with the previous
    one's kernels: its cycle time is not the decoder's."""
    timer = PhaseTimer(device)
    if phases and decoder._pipelined:  # its cycle is queued whole (DRAFTLAB_CYCLE=pipelined): no phases to time
        return dict.fromkeys(("draft_ms", "verify_ms", "draft_extend_ms"), float("nan"))
    if phases:
        decoder._draft = timer.wrap(decoder._draft, "draft")
        decoder._extend = timer.wrap(decoder._extend, "draft_extend")
        target_forward = decoder.target.forward
        decoder.target.forward = lambda *a, **k: (
            timer.wrap(target_forward, "verify") if k.get("tree_mask") is not None
            else timer.wrap(target_forward, "prefill"))(*a, **k)
    cycles, tokens, start = 0, 0, None
    for commit in decoder.stream(prompt, max_new_tokens=new_tokens, ignore_eos=True):
        if commit.accept_length is None:
            synchronize(timer.device)
            start = time.perf_counter()  # decoding starts after the prefill's token
        else:
            cycles += 1
            tokens += len(commit.tokens)
    synchronize(timer.device)
    elapsed = time.perf_counter() - start
    if phases:
        del decoder.target.forward, decoder._draft, decoder._extend
        return {"draft_ms": timer.ms("draft"), "verify_ms": timer.ms("verify"),
                "draft_extend_ms": timer.ms("draft_extend")}
    return {"cycles": cycles, "tokens": tokens, "cycle_ms": 1000 * elapsed / cycles,
            "tokens_per_second": tokens / elapsed, "mean_accept_length": tokens / cycles}


def host_waits_per_cycle(decoder: SpeculativeDecoder, prompt: list[int], new_tokens: int) -> float:
    """Operations per cycle that make the host wait for the device (reads back, copies from pageable
    memory), as CUDA's sync debug mode reports them, the prefill's included."""
    cycles = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for commit in decoder.stream(prompt, max_new_tokens=new_tokens, ignore_eos=True):
                cycles += commit.accept_length is not None
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught) / max(cycles, 1)


def weight_bytes(module: torch.nn.Module, skip: str | None = None) -> int:
    return sum(p.numel() * p.element_size() for n, p in module.named_parameters() if skip is None or skip not in n)


def floors_ms(target: TargetRunner, drafter: Eagle3Drafter, context: int, bandwidth: float) -> tuple[float, float]:
    """(the target's verify, one drafter pass) at their HBM floors, ms: bytes read / copy bandwidth."""
    cfg = target.model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dtype_bytes = next(target.model.parameters()).element_size()
    kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * dtype_bytes * context
    verify = (weight_bytes(target.model) + kv) / bandwidth * 1e3
    return verify, weight_bytes(drafter, skip="embed_tokens") / bandwidth * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--tiny", action="store_true", help="a tiny model (CPU check of the script)")
    parser.add_argument("--cache", default="auto", help="the target's cache (static on CUDA by default; "
                        "static on the CPU checks the static paths, DRAFTLAB_CYCLE=pipelined's included)")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--configs", default="3/1/4,5/1/6,5/4/8", help="steps/topk/num_draft_tokens, comma separated")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--compile-verify", action="store_true",
                        help="compile the verify's layer parts (StaticTarget(compile=True), as generate does "
                             "for long decodes: compile_pays)")
    parser.add_argument("--profile", action="store_true",
                        help="then torch.profiler over 16 plain steps and 16 cycles of the first config: where the "
                             "time between the floor and the cycle goes (kernels by device time, ops by host time)")
    args = parser.parse_args()
    device, dtype = parse_device(args.device), parse_dtype(args.dtype)
    shape = TINY if args.tiny else LLAMA_8B
    flags = {spec: resolve_spec_flags(*(int(v) for v in spec.split("/"))) for spec in args.configs.split(",")}
    room = max(max_cache_len(args.prompt_len, args.new_tokens, f) for f in flags.values())
    target, drafter = build_pair(shape, 64 if args.tiny else 32000, dtype, device, room, args.compile_verify,
                                 args.cache)
    prompt = torch.randint(0, shape["vocab_size"], (args.prompt_len,), generator=torch.Generator().manual_seed(0)).tolist()

    decoders = {"baseline": SpeculativeDecoder(target, None, None)}
    steps_of = {"baseline": 0}
    for spec, f in flags.items():
        decoders[spec] = SpeculativeDecoder(target, drafter, f)
        steps_of[spec] = f.steps
    for decoder in decoders.values():  # warm every path up before measuring any
        run(decoder, prompt, args.new_tokens, device)
    rows = {name: run(decoder, prompt, args.new_tokens, device) for name, decoder in decoders.items()}
    for name, decoder in decoders.items():
        rows[name].update(run(decoder, prompt, args.new_tokens, device, phases=True))
        if device.type == "cuda":
            rows[name]["host_waits_per_cycle"] = host_waits_per_cycle(decoder, prompt, 32)
    bandwidth = copy_bandwidth(args.device, gib=4.0 if device.type == "cuda" else 0.25)
    verify_floor, pass_floor = floors_ms(target, drafter, args.prompt_len + args.new_tokens // 2, bandwidth)
    for name, row in rows.items():
        row["break_even_accept_length"] = row["cycle_ms"] / rows["baseline"]["cycle_ms"]
        row["floor_ms"] = verify_floor + steps_of[name] * pass_floor
        row["x_floor"] = row["cycle_ms"] / row["floor_ms"]
    if args.json:
        print(json.dumps({"device": str(device), "dtype": args.dtype, "tiny": args.tiny, "provenance": provenance(),
                          "copy_bandwidth": bandwidth,
                          "verify_floor_ms": verify_floor, "drafter_pass_floor_ms": pass_floor, "rows": rows},
                         indent=2))
        return
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    switches = {k: v for k, v in provenance().items() if k in ("attention", "drafter", "cycle")}
    print(f"{'Llama-3.1-8B shape' if not args.tiny else 'tiny'} {args.dtype} on {name}, "
          f"prompt {args.prompt_len}, {args.new_tokens} new tokens, {switches}")
    print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s: verify floor {verify_floor:.3f} ms, drafter pass floor "
          f"{pass_floor:.3f} ms")
    print(f"{'config':>10} {'cycle ms':>9} {'draft':>8} {'verify':>8} {'extend':>8} {'tok/s':>8} {'AL':>5} "
          f"{'break-even AL':>14} {'floor ms':>9} {'x floor':>8} {'waits':>6}")
    for spec, r in rows.items():
        print(f"{spec:>10} {r['cycle_ms']:9.2f} {r['draft_ms']:8.2f} {r['verify_ms']:8.2f} {r['draft_extend_ms']:8.2f} "
              f"{r['tokens_per_second']:8.1f} {r['mean_accept_length']:5.2f} {r['break_even_accept_length']:14.2f} "
              f"{r['floor_ms']:9.3f} {r['x_floor']:8.2f} {r.get('host_waits_per_cycle', float('nan')):6.1f}")
    if args.profile:
        first = next(name for name in decoders if name != "baseline")
        for name in ("baseline", first):
            profile_cycles(decoders[name], prompt, device, name)


def profile_cycles(decoder: SpeculativeDecoder, prompt: list[int], device: torch.device, name: str) -> None:
    """Kernels by device time and operators by host time over 16 cycles (the prefill included)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in decoder.stream(prompt, max_new_tokens=16, ignore_eos=True):
            pass
        synchronize(device)
    averages = prof.key_averages()
    print(f"\n{name}: kernels by device time")
    print(averages.table(sort_by="self_device_time_total" if device.type == "cuda" else "self_cpu_time_total",
                         row_limit=15, max_name_column_width=60))
    print(f"{name}: operators by host time")
    print(averages.table(sort_by="cpu_time_total", row_limit=15, max_name_column_width=60))


if __name__ == "__main__":
    main()
