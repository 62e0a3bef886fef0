"""Test-only builders on top of draftlab.checkpoint.synth."""

from __future__ import annotations

import hashlib
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
