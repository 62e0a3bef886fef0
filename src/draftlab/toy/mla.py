"""The toy MLA pair: a tiny byte-level DeepSeek-V3 target (MLA attention with YaRN, dense MLPs) and
two MLA EAGLE-3 drafters for it (``Eagle3DeepseekV2ForCausalLM``, TorchSpec's layout), trained in
seconds like :mod:`draftlab.toy.pair`.

- ``drafter``: the MLA drafter as the engines serve Kimi-K2.5's.
- ``drafter-eagle3.1``: the same with ``fc_norm`` and ``norm_output`` (Kimi-K2.6's EAGLE-3.1 form),
  trained on from the first one's weights with its fc_norm weights drawn far from one, so that
  dropping either flag changes what it drafts.

The drafters' RoPE (YaRN, the mscale softmax correction) is copied from the target's config, as
TorchSpec's template does; the drafters attend with the target's MLA dimensions.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import DeepseekV3Config

from draftlab.checkpoint import DrafterConfig, TargetConfig
from draftlab.checkpoint.synth import mla_drafter_config
from draftlab.engines import written_aux_ids
from draftlab.fsutil import write_json_atomic
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner
from draftlab.toy import train
from draftlab.toy.pair import BATCH, CONTEXT, DRAFT_VOCAB, LENGTH, TRAIN_BYTES, UNROLL, cache_root
from draftlab.toy.tokenizer import END, VOCAB_SIZE, byte_tokenizer
from draftlab.vocab.build import build_mapping
from draftlab.vocab.counts import TokenCounts

MLA_TOY_VERSION = "3"  # bump when anything below changes what gets built
HIDDEN, LAYERS, HEADS, INTERMEDIATE = 64, 5, 4, 192
# Canonical aux layers (outputs of layers 1..3). Not layer 0: SGLang 0.5.13+ reads a DeepSeek/Kimi
# drafter's ids as inputs of layers unless the first is 1, so the output of layer 0 cannot be named there.
AUX_LAYERS = [1, 2, 3]
Q_LORA, KV_LORA, NOPE, ROPE, V_HEAD = 32, 32, 16, 8, 16
# YaRN as DeepSeek-V3 / Kimi configure it, at toy scale: factor 4 over an original window of 512, so
# the rotary frequencies and the softmax scale (mscale_all_dim) both differ from plain RoPE.
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": CONTEXT // 4, "beta_fast": 32,
        "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
TARGET_STEPS, DRAFTER_STEPS, VARIANT_STEPS, FEATURE_WINDOWS = 250, 120, 80, 256


@dataclass(frozen=True)
class MlaToy:
    target_dir: Path
    drafter_dir: Path  # the MLA drafter
    eagle31_dir: Path  # the MLA drafter with fc_norm + norm_output


def target_config() -> DeepseekV3Config:
    """A 5-layer DeepSeek-V3 whose every layer is dense (first_k_dense_replace = num_hidden_layers)."""
    return DeepseekV3Config(
        vocab_size=VOCAB_SIZE, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=HEADS, q_lora_rank=Q_LORA, kv_lora_rank=KV_LORA,
        qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=V_HEAD, first_k_dense_replace=LAYERS,
        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, max_position_embeddings=CONTEXT,
        rope_parameters={**YARN, "rope_theta": 10000.0}, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=END, pad_token_id=END)


def drafter_config_dict(target: dict, **flags: bool) -> dict:
    """The MLA drafter's config.json for the toy target (both engines' aux fields naming AUX_LAYERS, each in
    its newest release's convention for DeepSeek targets)."""
    family = TargetConfig.from_dict(target)
    config = mla_drafter_config(target, draft_vocab_size=DRAFT_VOCAB, torch_dtype="float32",
                                eagle_config={"eagle_aux_hidden_state_layer_ids": written_aux_ids(
                                    "sglang", AUX_LAYERS, target=family), "use_aux_hidden_state": True},
                                eagle_aux_hidden_state_layer_ids=written_aux_ids("vllm", AUX_LAYERS, target=family),
                                **flags)
    return {k: v for k, v in config.items() if v is not None}


def build_mla_toy(out_dir: str | Path, *, seed: int = 0) -> MlaToy:
    """Train and write ``out_dir/{target,drafter,drafter-eagle3.1}`` (``out_dir`` must not exist)."""
    out_dir = Path(out_dir)
    with train.building(out_dir) as tmp:
        _build(tmp, seed)
    return _layout(out_dir)


def _layout(folder: Path) -> MlaToy:
    return MlaToy(folder / "target", folder / "drafter", folder / "drafter-eagle3.1")


def _build(tmp: Path, seed: int) -> None:
    model, tokens, gen = train.trained_target(target_config(), seed, steps=TARGET_STEPS, batch=BATCH, length=LENGTH,
                                              train_bytes=TRAIN_BYTES)
    quiet = lambda _: None  # noqa: E731
    model.save_pretrained(tmp / "target")
    byte_tokenizer().save_pretrained(tmp / "target")
    target = json.loads((tmp / "target" / "config.json").read_text())  # as a user's drafter config would see it

    runner = TargetRunner(model, aux_layers=AUX_LAYERS)
    windows = train.random_windows(tokens, FEATURE_WINDOWS, LENGTH, gen)
    feats, logits = train.target_features(runner, windows, quiet)
    counts = TokenCounts.from_dense(torch.bincount(tokens.reshape(-1), minlength=VOCAB_SIZE).numpy())
    mapping = build_mapping(counts, DRAFT_VOCAB, VOCAB_SIZE)
    d2t, t2d = torch.from_numpy(mapping.d2t), torch.from_numpy(mapping.t2d)

    config = drafter_config_dict(target)
    drafter = Eagle3Drafter(DrafterConfig.from_dict(config), embed_tokens=runner.embed_tokens)
    drafter.d2t.copy_(d2t)
    train.train_drafter(drafter, windows, feats, logits, t2d, steps=DRAFTER_STEPS, batch=BATCH, unroll=UNROLL,
                        lr=3e-3, gen=gen, progress=quiet)
    _save(tmp / "drafter", config, drafter, t2d)

    config31 = drafter_config_dict(target, fc_norm=True, norm_output=True)
    eagle31 = Eagle3Drafter(DrafterConfig.from_dict(config31), embed_tokens=runner.embed_tokens)
    eagle31.load_state_dict(drafter.state_dict(), strict=False)  # all but the fc_norm weights
    with torch.no_grad():
        for norm in eagle31.fc_norm:
            norm.weight.uniform_(0.25, 2.0, generator=gen)
    train.train_drafter(eagle31, windows, feats, logits, t2d, steps=VARIANT_STEPS, batch=BATCH, unroll=UNROLL,
                        lr=2e-3, gen=gen, progress=quiet)
    _save(tmp / "drafter-eagle3.1", config31, eagle31, t2d)


def _save(folder: Path, config: dict, drafter: Eagle3Drafter, t2d: torch.Tensor) -> None:
    folder.mkdir()
    write_json_atomic(folder / "config.json", config)
    tensors = {k: v.detach().contiguous() for k, v in drafter.checkpoint_tensors().items()}
    save_file({**tensors, "t2d": t2d}, str(folder / "model.safetensors"))


def cached_mla_toy(seed: int = 0) -> MlaToy:
    """The toy MLA pair under the draftlab cache, built on first use (keyed by version, seed and Python)."""
    key = f"toy-mla-v{MLA_TOY_VERSION}-seed{seed}-py{sys.version_info.major}{sys.version_info.minor}"
    folder = cache_root() / key
    toy = _layout(folder)
    if not all((d / "config.json").is_file() for d in (toy.target_dir, toy.drafter_dir, toy.eagle31_dir)):
        build_mla_toy(folder, seed=seed)
    return toy
