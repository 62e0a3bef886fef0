"""A target split across GPUs (issue 8): generate vs probe, the probe vs its floor, memory per GPU.

GPU (the lead runs this on two H200s of one host; accelerate must be installed):
    PYTHONPATH=src python benchmarks/multi_gpu.py --device cuda --model llama-3.3-70b
CPU smoke run (any machine, seconds; the map is all CPU but accelerate's hooks are forced on):
    PYTHONPATH=src python benchmarks/multi_gpu.py --device cpu --model tiny

Models: a Llama-3.3-70B-shaped target (its config: hidden 8192, intermediate 28672, 80 layers, 64 heads,
8 KV heads, vocab 128256, llama3 RoPE) built empty (``init_empty_weights``), placed by
``infer_auto_device_map`` over balanced per-GPU budgets with the decoder layer unsplit, each tensor then
materialized with random bf16 values directly on its GPU, and dispatched (``dispatch_model``, the hooks
``device_map="auto"`` gives a loaded model). The EAGLE-3 drafter (hidden 8192, one layer, draft vocab
32000, the target's embedding shared) sits with the embedding, on the first GPU.

Weights are random but arranged so that acceptance is real and checkable (plain random weights accept
nothing, which makes any agreement trivial): the first 32000 ids (the draft vocabulary, d2t = 0) are
a random permutation ``f`` with some fixed points; the target's lm_head row y sums the embeddings of
f's preimage of y, so the target's greedy next token is f(token) (by a wide margin: a random 8192-dim
vector's product with itself dwarfs its product with another); the layers are random too but write
into the residual stream scaled by ``--residual-scale``, so every layer, the attention over the split
KV cache included, runs and perturbs the features without flipping the target's choice. The drafter's
fc averages the three aux features (about the embedding of the entry's token), its layer writes scaled
the same way, and its lm_head row y sums the embeddings of f(f)'s preimage of y: its first draft is
right whenever the features are the right position's, and later drafts only inside fixed points. A
misaligned or misplaced feature therefore shows as accept length 1. Values, not shapes, are arranged:
every pass costs what it costs with real weights.

(a) generate vs probe, chain 3/1/4: 8 random prompts x 128 new tokens through the reference decoder
    (what ``draftlab generate`` runs), then the probe (what ``draftlab probe`` runs, over given
    continuations) on the same tokens; per-prompt accept lengths compared (all cycles but the last,
    whose look-ahead generate did not produce; see probe_speed.versus_generate), wall times.
(b) the probe alone on 32 prompts x 1,024 continuation tokens vs its floor: one target pass over all
    tokens plus the drafter passes it cannot avoid (probe_speed.versus_floor).
(c) peak memory per GPU (``torch.cuda.max_memory_allocated``), after building and after each part.
One JSON line per result, then a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
from types import SimpleNamespace

import torch
import transformers as tf
from accelerate import dispatch_model, infer_auto_device_map, init_empty_weights
from accelerate.utils import get_balanced_memory, set_module_tensor_to_device
from probe_speed import versus_floor, versus_generate

from draftlab.checkpoint import DrafterConfig
from draftlab.models import Eagle3Drafter, TargetRunner
from draftlab.models.devices import model_devices

SHAPES = {
    # meta-llama/Llama-3.3-70B-Instruct config.json (architecture fields)
    "llama-3.3-70b": dict(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                          num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                          max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                          rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                          tie_word_embeddings=False, bos_token_id=128000, eos_token_id=[128001, 128008, 128009]),
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=False),
}
DRAFT_VOCAB = {"llama-3.3-70b": 32000, "tiny": 256}
RESIDUAL_WRITERS = ("o_proj.weight", "down_proj.weight")


def split_target(cfg: dict, device: str, dtype: torch.dtype, values: PredictableWeights) -> tf.PreTrainedModel:
    """The target built empty, placed layer by layer over the GPUs (all on one when there is one),
    materialized there with ``values``, dispatched."""
    with init_empty_weights():
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**cfg))
    no_split = model._no_split_modules
    if device == "cpu":  # one group per half of the layers, both on the CPU: the hooks still run
        device_map = {name: "cpu" for name in ("model.embed_tokens", "model.rotary_emb", "model.norm", "lm_head")}
        device_map.update({f"model.layers.{i}": "cpu" for i in range(cfg["num_hidden_layers"])})
    elif torch.cuda.device_count() == 1:  # the whole model on the one GPU: dispatch moves it there, no hooks
        device_map = {"": 0}
    else:
        budget = get_balanced_memory(model, no_split_module_classes=no_split, dtype=dtype, low_zero=False)
        device_map = infer_auto_device_map(model, max_memory=budget, no_split_module_classes=no_split, dtype=dtype)
    placed = _placement(device_map)
    for name, param in list(model.named_parameters()):
        where = placed(name)
        # dtype= too: without it the value is cast to the empty model's float32
        set_module_tensor_to_device(model, name, where, value=values.target(name, param.shape, where, dtype),
                                    dtype=dtype)
    dispatch_model(model, device_map=device_map, skip_keys=model._skip_keys_device_placement,
                   force_hooks=device == "cpu")
    assert {p.dtype for p in model.parameters()} == {dtype}, "the target must be built in the asked dtype"
    return model.eval()


def _placement(device_map: dict[str, object]):
    """Device of a parameter: the longest device-map prefix of its name."""
    def placed(name: str) -> torch.device:
        key = max((k for k in device_map if k == "" or name == k or name.startswith(k + ".")), key=len)
        value = device_map[key]
        return torch.device(f"cuda:{value}" if isinstance(value, int) else value)
    return placed


class PredictableWeights:
    """Random values with the structure described in the module docstring (one seed, any device)."""

    def __init__(self, cfg: dict, draft_vocab: int, residual_scale: float, fixed_points: float, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.vocab, self.hidden, self.draft_vocab = cfg["vocab_size"], cfg["hidden_size"], draft_vocab
        self.residual_scale, self.seed = residual_scale, seed
        fixed = torch.rand(draft_vocab, generator=gen) < fixed_points
        moving = torch.nonzero(~fixed).flatten()
        self.next = torch.arange(draft_vocab)
        self.next[moving] = moving[torch.randperm(moving.numel(), generator=gen)]  # f: a permutation of the draft ids
        self._embed: torch.Tensor | None = None

    def embedding(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The one random embedding (made on the first device asked, copied to others)."""
        if self._embed is None:
            gen = torch.Generator(device=device).manual_seed(self.seed)
            self._embed = torch.randn(self.vocab, self.hidden, generator=gen, device=device, dtype=dtype)
        return self._embed.to(device, dtype)

    def head(self, mapping: torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """Rows y < draft vocab: the sum of the embeddings of every x with mapping[x] = y; scaled by 1 / hidden."""
        embed = self.embedding(device, dtype)[:self.draft_vocab].float()
        rows = torch.zeros(self.draft_vocab, self.hidden, device=device).index_add_(0, mapping.to(device), embed)
        return (rows / self.hidden).to(dtype)

    def target(self, name: str, shape: torch.Size, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        if name.endswith("embed_tokens.weight"):
            return self.embedding(device, dtype).clone()
        if name == "lm_head.weight":  # draft ids first; the rest far behind
            rest = torch.randn(self.vocab - self.draft_vocab, self.hidden, device=device, dtype=dtype) * 1e-3
            return torch.cat([self.head(self.next, device, dtype), rest])
        return self.layer(name, shape, device, dtype)

    def layer(self, name: str, shape: torch.Size, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        if len(shape) == 1:  # norms
            return torch.ones(shape, device=device, dtype=dtype)
        scale = 0.02 * (self.residual_scale if name.endswith(RESIDUAL_WRITERS) else 1.0)
        return torch.randn(shape, device=device, dtype=dtype) * scale


def build_drafter(model: tf.PreTrainedModel, values: PredictableWeights, cfg: dict, draft_vocab: int,
                  dtype: torch.dtype) -> Eagle3Drafter:
    """An EAGLE-3 drafter for the target, on its embedding's device, sharing that embedding."""
    embed = model.get_input_embeddings()
    device = embed.weight.device
    fields = {k: v for k, v in cfg.items() if k not in ("bos_token_id", "eos_token_id")}
    drafter_cfg = DrafterConfig.from_dict({
        "architectures": ["LlamaForCausalLMEagle3"], **fields, "num_hidden_layers": 1, "hidden_act": "silu",
        "head_dim": cfg["hidden_size"] // cfg["num_attention_heads"], "draft_vocab_size": draft_vocab})
    with torch.device(device):
        drafter = Eagle3Drafter(drafter_cfg, embed_tokens=embed)
    drafter.place(dtype, device, keep_embedding=True).eval()
    with torch.no_grad():
        for name, param in drafter.named_parameters():
            if param is embed.weight:
                continue
            if name == "fc.weight":  # the mean of the three aux features
                eye = torch.eye(cfg["hidden_size"], device=device, dtype=dtype) / 3
                param.copy_(torch.cat([eye, eye, eye], dim=1))
            elif name == "lm_head.weight":
                param.copy_(values.head(values.next[values.next], device, dtype))
            else:
                param.copy_(values.layer(name, param.shape, device, dtype))
    return drafter


def gpu_memory(device: str) -> dict[str, float] | None:
    """Peak allocated GiB per GPU since the last reset, then reset."""
    if not device.startswith("cuda"):
        return None
    out = {}
    for i in range(torch.cuda.device_count()):
        out[f"cuda:{i}"] = round(torch.cuda.max_memory_allocated(i) / 2**30, 2)
        torch.cuda.reset_peak_memory_stats(i)
    return out


def table(rows: list[dict]) -> str:
    lines = ["| part | what | result |", "|---|---|---|"]
    for r in rows:
        if r["part"] == "a":
            lines.append(f"| a | generate vs probe, {r['config']}, {r['prompts']} x {r['new_tokens']} tokens | "
                         f"generate {r['generate_s']} s, probe {r['probe_s']} s ({r['speedup']}x); matching accept "
                         f"lengths {r['prompts_with_matching_accept_lengths']}/{r['prompts']}; mean accept "
                         f"{r['mean_accept_length']} |")
        elif r["part"] == "b":
            lines.append(f"| b | probe vs floor, {r['config']}, {r['prompts']} x {r['tokens_each']} tokens | "
                         f"probe {r['probe_s']} s, floor {r['floor_s']} s, ratio {r['probe_over_floor']} |")
        elif r["part"] == "c":
            peaks = ", ".join(f"{d} {g} GiB" for d, g in (r["peak_gib"] or {}).items()) or "n/a (cpu)"
            lines.append(f"| c | peak memory after {r['after']} | {peaks} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--model", default="llama-3.3-70b", choices=sorted(SHAPES))
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--batch-size", type=int, default=4, help="sequences per probe pass")
    parser.add_argument("--residual-scale", type=float, default=1e-3, help="scale of what layers add to the residual")
    parser.add_argument("--fixed-points", type=float, default=0.3, help="share of draft ids the permutation fixes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    big = args.model != "tiny"
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    torch.manual_seed(args.seed)
    cfg = SHAPES[args.model]
    values = PredictableWeights(cfg, DRAFT_VOCAB[args.model], args.residual_scale, args.fixed_points, args.seed)
    model = split_target(cfg, args.device, dtype, values)
    target = TargetRunner(model)  # dynamic cache: the parameters span devices (or hooks run on the CPU)
    drafter = build_drafter(model, values, cfg, DRAFT_VOCAB[args.model], dtype)
    del values  # its copy of the embedding is no longer needed
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    print(json.dumps({"device": device_name, "gpus": torch.cuda.device_count() if args.device == "cuda" else 0,
                      "model": args.model, "dtype": args.dtype, "torch": torch.__version__,
                      "transformers": tf.__version__, "target_devices": model_devices(model),
                      "drafter_device": str(drafter.lm_head.weight.device), "cache": target.cache}), flush=True)
    rows = [{"part": "c", "after": "building", "peak_gib": gpu_memory(args.device)}]
    runs = SimpleNamespace(device=str(target.device), batch_size=args.batch_size, prompt_len=128 if big else 16,
                           gen_prompts=8 if big else 2, gen_tokens=128 if big else 24,
                           floor_prompts=32 if big else 4, floor_tokens=1024 if big else 48)
    for part, run in (("a", versus_generate), ("b", versus_floor)):
        rows.append(run(target, drafter, (3, 1, 4), runs))
        rows.append({"part": "c", "after": f"part {part}", "peak_gib": gpu_memory(args.device)})
    for row in rows:
        print(json.dumps(row), flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
