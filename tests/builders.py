"""Test-only builders on top of draftlab.checkpoint.synth."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from draftlab.checkpoint.configs import TargetConfig
from draftlab.checkpoint.synth import specforge_drafter_config, write_drafter, write_target

TINY_TARGETS = ("llama", "qwen3_moe", "deepseek_v3")
NUM_LAYERS = 8
SEEN_AUX = [1, 3, 5]  # canonical ids the test drafters are "trained" on (not the default [1, 3, 4])


def tiny_target_config(name: str) -> dict[str, Any]:
    """A small config from the transformers class of each family (8 layers, hidden 64, vocab 512)."""
    import transformers

    common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=NUM_LAYERS,
                  num_attention_heads=4, max_position_embeddings=4096, bos_token_id=1, eos_token_id=2)
    if name == "llama":
        cfg = transformers.LlamaConfig(num_key_value_heads=2, **common)
    elif name == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(num_key_value_heads=2, moe_intermediate_size=32, num_experts=4,
                                          num_experts_per_tok=2, **common)
    else:
        cfg = transformers.DeepseekV3Config(num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=4,
                                            num_experts_per_tok=2, n_shared_experts=1, q_lora_rank=32,
                                            kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                            v_head_dim=16, first_k_dense_replace=1, **common)
    config = cfg.to_dict()
    config["architectures"] = [type(cfg).__name__.replace("Config", "ForCausalLM")]
    config["dtype"] = "bfloat16"
    return config


def make_pair(tmp: Path, target_cfg: dict[str, Any], *, layer_prefix: str = "midlayer.", embed: bool = False,
              **drafter_fields: Any) -> tuple[Path, Path]:
    """A target folder and a clean drafter for it (both aux fields set to SEEN_AUX), then overrides."""
    target = write_target(tmp / "target", target_cfg)
    t = TargetConfig.from_dict(target_cfg)
    fields: dict[str, Any] = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": SEEN_AUX},
                              "eagle_aux_hidden_state_layer_ids": [k + 1 for k in SEEN_AUX]}
    fields.update(drafter_fields)
    config = specforge_drafter_config(t, draft_vocab_size=128, **fields)
    config = {k: v for k, v in config.items() if v is not DROP}
    drafter = write_drafter(tmp / "drafter", config, layer_prefix=layer_prefix, embed=embed)
    return drafter, target


DROP = object()  # pass as a field value to remove the key from the drafter config


def folder_hash(folder: Path) -> str:
    """A hash of every file's name, bytes and mode under ``folder``."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        h.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            h.update(path.read_bytes())
            h.update(str(path.stat().st_mode).encode())
    return h.hexdigest()


def stored_tensor_bytes(folder: Path) -> dict[str, bytes]:
    """Each tensor's stored bytes (safetensors: the bytes at its offsets; .bin: torch's own bytes)."""
    from draftlab.checkpoint import open_checkpoint

    ckpt = open_checkpoint(folder)
    if ckpt.format != "safetensors":
        import torch

        return {k: v.contiguous().view(torch.uint8).numpy().tobytes() for k, v in ckpt.load().items()}
    out = {}
    for name, info in ckpt.tensors.items():
        with info.file.open("rb") as f:
            f.seek(info.data_start)
            out[name] = f.read(info.data_end - info.data_start)
    return out


def as_speculators(drafter: Path, **top: Any) -> Path:
    """Rewrite ``drafter``'s flat config in the speculators layout, with the top-level fields speculators'
    converter writes (``target_hidden_size`` and ``norm_output`` as it leaves them), then ``top``."""
    import json

    flat = json.loads((drafter / "config.json").read_text())
    outer = ("draft_vocab_size", "eagle_aux_hidden_state_layer_ids", "eagle_config", "torch_dtype", "architectures")
    layer = {k: v for k, v in flat.items() if k not in outer}
    spec = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "norm_before_residual": False,
            "speculators_config": {"algorithm": "eagle3"}, "transformer_layer_config": layer,
            "draft_vocab_size": flat["draft_vocab_size"], "target_hidden_size": None, "norm_output": False,
            "eagle_aux_hidden_state_layer_ids": flat.get("eagle_aux_hidden_state_layer_ids"),
            "torch_dtype": flat.get("torch_dtype"), **top}
    (drafter / "config.json").write_text(json.dumps(spec))
    return drafter


def with_tensors(drafter: Path, extra: dict[str, tuple[str, tuple[int, ...]]], *, sparse: bool = False) -> Path:
    """Rewrite ``drafter``'s model.safetensors with ``extra`` tensors (name -> (dtype, shape)) added."""
    from draftlab.checkpoint import open_checkpoint
    from draftlab.checkpoint.synth import write_safetensors

    ckpt = open_checkpoint(drafter)
    specs = {n: (info.dtype, tuple(info.shape)) for n, info in ckpt.tensors.items()}
    values = {n: ckpt.read_ints(n) for n in ("d2t", "t2d") if n in specs}
    write_safetensors(drafter / "model.safetensors", {**specs, **extra}, values=values, sparse=sparse)
    return drafter


# --- Kimi K2.x: a real-size target and an MLA drafter (reference/drafter-variants.md section 4) -------------

K2_LAYERS = 61
K2_MLA = dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
K2_ROPE = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 1.0,
           "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}


def k2_target_config() -> dict[str, Any]:
    """Kimi-K2's dimensions through transformers' DeepseekV3Config (16 routed experts instead of 384, to keep
    the header small: the experts play no part in loading a drafter)."""
    import transformers

    cfg = transformers.DeepseekV3Config(
        vocab_size=163840, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
        num_hidden_layers=K2_LAYERS, num_attention_heads=64, num_key_value_heads=64, n_routed_experts=16,
        num_experts_per_tok=8, n_shared_experts=1, first_k_dense_replace=1, max_position_embeddings=131072,
        rope_theta=50000.0, rope_scaling=dict(K2_ROPE), bos_token_id=163584, eos_token_id=163585, **K2_MLA)
    config = cfg.to_dict()
    config["architectures"] = ["DeepseekV3ForCausalLM"]
    config["dtype"] = "bfloat16"
    return config


def k2_mla_drafter_config(target: TargetConfig, **fields: Any) -> dict[str, Any]:
    """TorchSpec's kimi_k25_eagle3_mla template (as exported for vLLM: ids [2, 30, 58] at both places), sized
    for ``target``; ``fields`` override any key."""
    config: dict[str, Any] = {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "num_hidden_layers": 1,
        "hidden_size": 7168, "intermediate_size": 18432, "num_attention_heads": 64, "num_key_value_heads": 64,
        **K2_MLA, "rms_norm_eps": 1e-5, "vocab_size": 163840, "draft_vocab_size": 163840,
        "max_position_embeddings": target.max_position_embeddings, "rope_theta": target.rope.theta,
        "rope_scaling": target.rope.scaling, "bos_token_id": target.bos_token_id,
        "eos_token_id": target.eos_token_id, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "eagle_aux_hidden_state_layer_ids": [2, 30, 58],
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True,
                         "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                         "use_mtp_layernorm": False},
    }
    config.update(fields)
    return config


def mla_drafter_specs(config: dict[str, Any], *, fc_norm: bool = False) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The tensors of an MLA EAGLE-3 drafter (``layers.0.*``, as TorchSpec exports them), section 4(c)."""
    h, heads, inter = config["hidden_size"], config["num_attention_heads"], config["intermediate_size"]
    q, kv, nope, rope, v = (config[k] for k in K2_MLA)
    p, dt = "layers.0.", "BF16"
    specs = {"fc.weight": (dt, (h, 3 * h)), p + "self_attn.q_a_proj.weight": (dt, (q, 2 * h)),
             p + "self_attn.q_a_layernorm.weight": (dt, (q,)),
             p + "self_attn.q_b_proj.weight": (dt, (heads * (nope + rope), q)),
             p + "self_attn.kv_a_proj_with_mqa.weight": (dt, (kv + rope, 2 * h)),
             p + "self_attn.kv_a_layernorm.weight": (dt, (kv,)),
             p + "self_attn.kv_b_proj.weight": (dt, (heads * (nope + v), kv)),
             p + "self_attn.o_proj.weight": (dt, (h, heads * v)),
             p + "mlp.gate_proj.weight": (dt, (inter, h)), p + "mlp.up_proj.weight": (dt, (inter, h)),
             p + "mlp.down_proj.weight": (dt, (h, inter)), "norm.weight": (dt, (h,)),
             "lm_head.weight": (dt, (config["draft_vocab_size"], h))}
    for norm in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        specs[f"{p}{norm}.weight"] = (dt, (h,))
    if fc_norm:
        specs.update({f"fc_norm.{i}.weight": (dt, (h,)) for i in range(3)})
    return specs


def k2_mla_pair(tmp: Path, *, fc_norm: bool = False, **fields: Any) -> tuple[Path, Path]:
    """A real-size Kimi-K2-shaped target and an MLA drafter for it, both over sparse files (``fc_norm``: an
    EAGLE-3.1 drafter, the flag and its tensors)."""
    import json

    from draftlab.checkpoint.synth import write_safetensors

    target_cfg = k2_target_config()
    target = write_target(tmp / "target", target_cfg, sparse=True)
    config = k2_mla_drafter_config(TargetConfig.from_dict(target_cfg), **({"fc_norm": True} if fc_norm else {}),
                                   **fields)
    config = {k: v for k, v in config.items() if v is not DROP}
    drafter = tmp / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps(config, indent=2))
    write_safetensors(drafter / "model.safetensors", mla_drafter_specs(config, fc_norm=fc_norm), sparse=True)
    return drafter, target


def byte_prompts(folder: Path, texts: list[str]) -> Path:
    """``folder/prompts.jsonl``: each text's bytes as input_ids (the toy targets' byte-level vocabulary)."""
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in texts))
    return path
