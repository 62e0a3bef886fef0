"""Synthetic checkpoints: real configs and safetensors files with real names and shapes.

Used by the demo, the tests and the benchmarks, without torch. Float tensors get small random
values (norm weights get ones), or no data at all with ``sparse=True``: the file then has a real
header and a hole of the right size, so a multi-GB "checkpoint" costs no disk and no time.
"""

from __future__ import annotations

import json
import random
import struct
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from draftlab.checkpoint.configs import DrafterConfig, TargetConfig, text_config
from draftlab.checkpoint.safetensors_header import DTYPE_SIZES
from draftlab.checkpoint.variants import FEATURE_NORMS

Shape = tuple[int, ...]
Specs = dict[str, tuple[str, Shape]]  # name -> (safetensors dtype, shape)

_ST_DTYPE = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def st_dtype(torch_name: str | None) -> str:
    """The safetensors spelling of a config's torch dtype (bfloat16 when unset)."""
    return _ST_DTYPE.get(str(torch_name or "bfloat16").removeprefix("torch."), "BF16")


def write_safetensors(path: Path, specs: Specs, *, values: dict[str, list[int]] | None = None,
                      sparse: bool = False, seed: int = 0) -> None:
    """Write ``specs`` as one safetensors file.

    Integer and bool tensors take their values from ``values``; float tensors are random (or a
    hole, with ``sparse``).
    """
    values = values or {}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in specs.items():
        n = _nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        base = f.tell()
        for name, (dtype, shape) in specs.items():
            f.seek(base + header[name]["data_offsets"][0])
            if name in values:
                f.write(_encode_ints(dtype, values[name]))
            elif not sparse:
                ones = name.endswith("norm.weight")
                f.write(_encode_floats(dtype, _numel(shape), rng, ones))
        f.truncate(base + offset)


def write_config(folder: Path, config: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")


# --- targets -------------------------------------------------------------------------------------

def target_specs(config: dict[str, Any]) -> Specs:
    """Names and shapes of a HF causal LM (Llama/Qwen/Mistral dense or MoE, DeepseekV3/Kimi MLA+MoE)."""
    t = TargetConfig.from_dict(config)
    cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    dt = st_dtype(t.dtype)
    h, v = t.hidden_size, t.vocab_size
    specs: Specs = {"model.embed_tokens.weight": (dt, (v, h))}
    for i in range(t.num_layers):
        p = f"model.layers.{i}."
        specs.update(_attention_specs(p + "self_attn.", t, cfg, dt))
        specs.update(_mlp_specs(p + "mlp.", i, t, cfg, dt))
        specs[p + "input_layernorm.weight"] = (dt, (h,))
        specs[p + "post_attention_layernorm.weight"] = (dt, (h,))
    specs["model.norm.weight"] = (dt, (h,))
    if not t.tie_word_embeddings:
        specs["lm_head.weight"] = (dt, (v, h))
    return specs


def _attention_specs(p: str, t: TargetConfig, cfg: dict[str, Any], dt: str) -> Specs:
    h, nh = t.hidden_size, t.num_attention_heads
    if t.attention == "MLA":
        nope, rope, vdim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        kv_rank, q_rank = cfg["kv_lora_rank"], cfg.get("q_lora_rank")
        specs: Specs = {}
        if q_rank:
            specs[p + "q_a_proj.weight"] = (dt, (q_rank, h))
            specs[p + "q_a_layernorm.weight"] = (dt, (q_rank,))
            specs[p + "q_b_proj.weight"] = (dt, (nh * (nope + rope), q_rank))
        else:
            specs[p + "q_proj.weight"] = (dt, (nh * (nope + rope), h))
        specs[p + "kv_a_proj_with_mqa.weight"] = (dt, (kv_rank + rope, h))
        specs[p + "kv_a_layernorm.weight"] = (dt, (kv_rank,))
        specs[p + "kv_b_proj.weight"] = (dt, (nh * (nope + vdim), kv_rank))
        specs[p + "o_proj.weight"] = (dt, (h, nh * vdim))
        return specs
    hd, nkv = t.head_dim, t.num_key_value_heads
    specs = {p + "q_proj.weight": (dt, (nh * hd, h)), p + "k_proj.weight": (dt, (nkv * hd, h)),
             p + "v_proj.weight": (dt, (nkv * hd, h)), p + "o_proj.weight": (dt, (h, nh * hd))}
    if cfg.get("attention_bias") or t.model_type in ("qwen2", "qwen2_moe"):
        specs.update({p + "q_proj.bias": (dt, (nh * hd,)), p + "k_proj.bias": (dt, (nkv * hd,)),
                      p + "v_proj.bias": (dt, (nkv * hd,))})
    if t.model_type.startswith("qwen3"):
        specs.update({p + "q_norm.weight": (dt, (hd,)), p + "k_norm.weight": (dt, (hd,))})
    return specs


def _mlp_specs(p: str, layer: int, t: TargetConfig, cfg: dict[str, Any], dt: str) -> Specs:
    h = t.hidden_size
    dense = t.num_experts is None or layer < int(cfg.get("first_k_dense_replace") or 0)
    if dense:
        return _ffn(p, h, int(cfg["intermediate_size"]), dt)
    moe_i = int(t.moe_intermediate_size or cfg["intermediate_size"])
    specs: Specs = {p + "gate.weight": (dt, (t.num_experts, h))}
    if t.attention == "MLA":
        specs[p + "gate.e_score_correction_bias"] = ("F32", (t.num_experts,))
    for e in range(t.num_experts):
        specs.update(_ffn(f"{p}experts.{e}.", h, moe_i, dt))
    if t.num_shared_experts:
        specs.update(_ffn(p + "shared_experts.", h, moe_i * int(t.num_shared_experts), dt))
    return specs


def _ffn(p: str, h: int, inter: int, dt: str) -> Specs:
    return {p + "gate_proj.weight": (dt, (inter, h)), p + "up_proj.weight": (dt, (inter, h)),
            p + "down_proj.weight": (dt, (h, inter))}


def write_target(folder: Path, config: dict[str, Any], *, shards: int = 1, sparse: bool = False) -> Path:
    """A target checkpoint folder: config.json plus one file or ``shards`` files and an index."""
    write_config(folder, config)
    specs = target_specs(config)
    if shards == 1:
        write_safetensors(folder / "model.safetensors", specs, sparse=sparse)
        return folder
    names = list(specs)
    per = -(-len(names) // shards)
    weight_map: dict[str, str] = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: specs[n] for n in names[s * per:(s + 1) * per]}
        write_safetensors(folder / file, part, sparse=sparse, seed=s)
        weight_map.update(dict.fromkeys(part, file))
    total = sum(_nbytes(*spec) for spec in specs.values())
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
    return folder


# --- drafters ------------------------------------------------------------------------------------

def specforge_drafter_config(target: TargetConfig, *, draft_vocab_size: int, intermediate_size: int | None = None,
                             **fields: Any) -> dict[str, Any]:
    """A flat SpecForge-layout drafter config sized for ``target``; ``fields`` override any key."""
    heads = target.num_attention_heads
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
        "hidden_size": target.hidden_size, "intermediate_size": intermediate_size or 2 * target.hidden_size,
        "num_attention_heads": heads, "num_key_value_heads": target.num_key_value_heads if target.attention != "MLA"
        else heads, "head_dim": target.hidden_size // heads, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "max_position_embeddings": target.max_position_embeddings, "rope_theta": target.rope.theta,
        "rope_scaling": target.rope.scaling, "vocab_size": target.vocab_size, "draft_vocab_size": draft_vocab_size,
        "bos_token_id": target.bos_token_id, "eos_token_id": target.eos_token_id, "tie_word_embeddings": False,
        "torch_dtype": target.dtype or "bfloat16",
    }
    config.update(fields)
    return config


MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def mla_drafter_config(target: dict[str, Any], *, draft_vocab_size: int, intermediate_size: int | None = None,
                       **fields: Any) -> dict[str, Any]:
    """A TorchSpec-style MLA drafter config (``Eagle3DeepseekV2ForCausalLM``) for a DeepSeek-V3 / Kimi-K2
    target: the target's MLA dimensions, RoPE and YaRN, a dense MLP (the target's dense width by
    default); ``fields`` override any key."""
    cfg = text_config(target)
    kind = cfg.get("model_type")
    config = specforge_drafter_config(
        TargetConfig.from_dict(target), draft_vocab_size=draft_vocab_size,
        intermediate_size=intermediate_size or int(cfg["intermediate_size"]),
        architectures=["Eagle3DeepseekV2ForCausalLM"], model_type=kind if kind in ("kimi_k2", "deepseek_v3")
        else "deepseek_v3", **{k: cfg.get(k) for k in MLA_KEYS}, rms_norm_eps=cfg.get("rms_norm_eps", 1e-6))
    del config["head_dim"]  # DeepSeek configs mean the rope width by it; the MLA dims say everything
    config.update(fields)
    return config


def drafter_specs(d: DrafterConfig, *, layer_prefix: str = "midlayer.", embed: bool = False,
                  dtype: str | None = None) -> Specs:
    """Names and shapes of an EAGLE-3 drafter (``layer_prefix`` "midlayer." or "layers.0."), its variant's
    tensors included (MLA attention, input_norm, fc_norm)."""
    dt = st_dtype(dtype or d.dtype)
    h, inter, t = d.hidden_size, d.intermediate_size, d.target_hidden_size
    p = layer_prefix
    specs: Specs = {"fc.weight": (dt, (h, 3 * t))}
    for flag in FEATURE_NORMS:
        if getattr(d.variant, flag.name):
            specs.update({name: (dt, shape) for name, shape in flag.weights(3, t).items()})
    specs.update(_drafter_attention_specs(p + "self_attn.", d, dt))
    specs.update(_ffn(p + "mlp.", h, inter, dt))
    for norm in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        specs[f"{p}{norm}.weight"] = (dt, (h,))
    specs["norm.weight"] = (dt, (h,))
    specs["lm_head.weight"] = (dt, (d.draft_vocab_size, h))
    if embed:
        specs["embed_tokens.weight"] = (dt, (d.vocab_size, h))
    return specs


def _drafter_attention_specs(p: str, d: DrafterConfig, dt: str) -> Specs:
    """The first layer's attention: q/k/v (or MLA's down-projections) take the 2H concat."""
    h, nh = d.hidden_size, d.num_attention_heads
    mla = d.variant.mla
    if mla is None:
        nkv, hd = d.num_key_value_heads, d.head_dim
        return {p + "q_proj.weight": (dt, (nh * hd, 2 * h)), p + "k_proj.weight": (dt, (nkv * hd, 2 * h)),
                p + "v_proj.weight": (dt, (nkv * hd, 2 * h)), p + "o_proj.weight": (dt, (h, nh * hd))}
    specs: Specs = {}
    if mla.q_lora_rank:
        specs[p + "q_a_proj.weight"] = (dt, (mla.q_lora_rank, 2 * h))
        specs[p + "q_a_layernorm.weight"] = (dt, (mla.q_lora_rank,))
        specs[p + "q_b_proj.weight"] = (dt, (nh * mla.qk_head_dim, mla.q_lora_rank))
    else:
        specs[p + "q_proj.weight"] = (dt, (nh * mla.qk_head_dim, 2 * h))
    specs[p + "kv_a_proj_with_mqa.weight"] = (dt, (mla.kv_lora_rank + mla.qk_rope_head_dim, 2 * h))
    specs[p + "kv_a_layernorm.weight"] = (dt, (mla.kv_lora_rank,))
    specs[p + "kv_b_proj.weight"] = (dt, (nh * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank))
    specs[p + "o_proj.weight"] = (dt, (h, nh * mla.v_head_dim))
    return specs


def vocab_mapping(target_ids: Iterable[int], vocab_size: int) -> tuple[list[int], list[int]]:
    """SpecForge's encoding of a draft vocabulary: d2t offsets and the t2d mask."""
    ids = sorted(target_ids)
    chosen = set(ids)
    return [t - i for i, t in enumerate(ids)], [int(i in chosen) for i in range(vocab_size)]


def write_drafter(folder: Path, config: dict[str, Any], *, layer_prefix: str = "midlayer.",
                  target_ids: Iterable[int] | None = None, embed: bool = False, sparse: bool = False,
                  seed: int = 1) -> Path:
    """A drafter folder; ``target_ids`` (the draft vocabulary) become d2t/t2d, every ``draft_vocab_size``-th
    target id when not given."""
    write_config(folder, config)
    d = DrafterConfig.from_dict(config)
    specs = drafter_specs(d, layer_prefix=layer_prefix, embed=embed)
    if target_ids is None:
        step = max(1, d.vocab_size // d.draft_vocab_size)
        target_ids = range(0, step * d.draft_vocab_size, step)
    d2t, t2d = vocab_mapping(target_ids, d.vocab_size)
    specs["d2t"] = ("I64", (len(d2t),))
    specs["t2d"] = ("BOOL", (len(t2d),))
    write_safetensors(folder / "model.safetensors", specs, values={"d2t": d2t, "t2d": t2d}, sparse=sparse, seed=seed)
    return folder


# --- encoding ------------------------------------------------------------------------------------

def _numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _nbytes(dtype: str, shape: Shape) -> int:
    return int(_numel(shape) * DTYPE_SIZES[dtype])


def _encode_ints(dtype: str, values: list[int]) -> bytes:
    code = {"I64": "q", "I32": "i", "BOOL": "B", "U8": "B"}[dtype]
    return array(code, values).tobytes()


def _encode_floats(dtype: str, n: int, rng: random.Random, ones: bool) -> bytes:
    vals = [1.0] * n if ones else [(rng.random() - 0.5) * 0.04 for _ in range(n)]
    if dtype == "F32":
        return array("f", vals).tobytes()
    if dtype == "F16":
        return struct.pack(f"<{n}e", *vals)
    bits = array("I", array("f", vals).tobytes())
    return array("H", (b >> 16 for b in bits)).tobytes()
