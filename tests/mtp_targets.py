"""Targets that ship MTP layers, headers only (sparse safetensors): DeepSeek-V3 / GLM style
(``model.layers.{L}.eh_proj``), Qwen3-Next / Qwen3.5 style (``mtp.fc``), MiMo style (``model.mtp_layers.0.``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders import NUM_LAYERS, tiny_target_config

from draftlab.checkpoint.synth import target_specs, write_config, write_safetensors


def _layer(config: dict[str, Any], index: int, prefix: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Decoder layer ``index``'s specs of a target one layer deeper, renamed under ``prefix``."""
    deeper = target_specs({**config, "num_hidden_layers": index + 1})
    return {prefix + n.removeprefix(f"model.layers.{index}."): spec for n, spec in deeper.items()
            if n.startswith(f"model.layers.{index}.")}


def mtp_target(folder: Path, style: str, *, count: int | None = 1, stored: int = 1, **config: Any) -> Path:
    """A target of ``style`` ("deepseek", "glm", "qwen3_next", "qwen3_5", "mimo", "llama": none) whose config
    declares ``count`` MTP layers (None: no count key) and stores ``stored``."""
    base = tiny_target_config("deepseek_v3" if style == "deepseek" else "llama")
    arch, model_type, key = {
        "deepseek": ("DeepseekV3ForCausalLM", "deepseek_v3", "num_nextn_predict_layers"),
        "glm": ("Glm4MoeForCausalLM", "glm4_moe", "num_nextn_predict_layers"),
        "qwen3_next": ("Qwen3NextForCausalLM", "qwen3_next", "num_nextn_predict_layers"),
        "qwen3_5": ("Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", "mtp_num_hidden_layers"),
        "mimo": ("MiMoForCausalLM", "mimo", "num_nextn_predict_layers"),
        "llama": ("LlamaForCausalLM", "llama", None),
    }[style]
    cfg = {**base, "architectures": [arch], "model_type": model_type, **config}
    if key is not None and count is not None:
        cfg[key] = count
    specs = target_specs(cfg)
    dt, h = "BF16", cfg["hidden_size"]
    for i in range(stored if key is not None else 0):
        if style in ("deepseek", "glm"):
            p = f"model.layers.{NUM_LAYERS + i}."
            specs |= _layer(cfg, NUM_LAYERS + i, p) | {p + "enorm.weight": (dt, (h,)), p + "hnorm.weight": (dt, (h,)),
                                                       p + "eh_proj.weight": (dt, (h, 2 * h)),
                                                       p + "shared_head.norm.weight": (dt, (h,))}
        elif style == "mimo":
            p = f"model.mtp_layers.{i}."
            specs |= _layer(cfg, 0, p) | {p + "token_layernorm.weight": (dt, (h,)),
                                          p + "hidden_layernorm.weight": (dt, (h,)),
                                          p + "input_proj.weight": (dt, (h, 2 * h)),
                                          p + "final_layernorm.weight": (dt, (h,))}
        else:
            specs |= _layer(cfg, 0, f"mtp.layers.{i}.") | {
                "mtp.fc.weight": (dt, (h, 2 * h)), "mtp.pre_fc_norm_embedding.weight": (dt, (h,)),
                "mtp.pre_fc_norm_hidden.weight": (dt, (h,)), "mtp.norm.weight": (dt, (h,))}
    write_config(folder, cfg)
    write_safetensors(folder / "model.safetensors", specs, sparse=True)
    return folder
