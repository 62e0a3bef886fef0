"""The toy MTP targets, byte-level, each shipping one MTP layer in a second shard under
``model.safetensors.index.json``, as published checkpoints hold them:

- ``target``: a DeepSeek-V3 (MLA with YaRN, MoE past its first layer, grouped routing) with
  ``num_nextn_predict_layers: 1``: ``model.layers.4.`` holds ``enorm``, ``hnorm``, ``eh_proj``,
  ``shared_head.norm`` and an MLA + MoE decoder layer (no ``embed_tokens`` or ``shared_head.head`` of its
  own: the target's);
- ``qwen3-next``: a Qwen3-Next (gated attention with q/k norms and partial RoPE, MoE with a gated shared
  expert, zero-centred norms) whose ``mtp.*`` weights are Qwen3-Next's (``mtp.fc``,
  ``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden``, ``mtp.layers.0.``, ``mtp.norm``). Its decoder
  layers are all full attention: the real model's linear-attention (Gated DeltaNet) layers keep a recurrent
  state that the reference runner's tree verification cannot crop; the MTP layer is full attention in the
  real model too.

Each target is trained for seconds like :mod:`draftlab.toy.mla`'s; its head on the target's own final
hidden states, the next token's distribution two ahead, with two unrolled steps that feed its output back
as SGLang does (so deeper drafts accept now and then). Its enorm/hnorm weights start far from one, so
dropping either norm changes what it drafts.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import DeepseekV3Config, PretrainedConfig, Qwen3NextConfig

from draftlab.engines.mtp_head import mtp_rules
from draftlab.fsutil import write_json_atomic
from draftlab.models.mtp import MtpConfig, MtpDrafter
from draftlab.models.target import TargetRunner
from draftlab.toy import train
from draftlab.toy.mla import KV_LORA, NOPE, Q_LORA, ROPE, V_HEAD, YARN
from draftlab.toy.pair import BATCH, CONTEXT, LENGTH, TRAIN_BYTES, cache_root
from draftlab.toy.tokenizer import END, VOCAB_SIZE, byte_tokenizer

MTP_TOY_VERSION = "2"  # bump when anything below changes what gets built
HIDDEN, LAYERS, HEADS, INTERMEDIATE, EXPERTS, MOE_INTERMEDIATE = 64, 4, 4, 192, 4, 48
TARGET_STEPS, HEAD_STEPS, FEATURE_WINDOWS, UNROLL = 500, 150, 192, 2
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


@dataclass(frozen=True)
class MtpToy:
    target_dir: Path  # the DeepSeek-V3 target with its MTP layer
    qwen3_next_dir: Path  # the Qwen3-Next target with its mtp.* layer


def target_config() -> DeepseekV3Config:
    """A 4-layer DeepSeek-V3: layer 0 dense, layers 1-3 MoE (4 routed experts in 2 groups, top-2 from the best
    group, one shared expert), with one MTP layer."""
    return DeepseekV3Config(
        vocab_size=VOCAB_SIZE, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=HEADS, q_lora_rank=Q_LORA, kv_lora_rank=KV_LORA,
        qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=V_HEAD, first_k_dense_replace=1,
        n_routed_experts=EXPERTS, num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1,
        moe_intermediate_size=MOE_INTERMEDIATE, max_position_embeddings=CONTEXT, num_nextn_predict_layers=1,
        rope_parameters={**YARN, "rope_theta": 10000.0}, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=END, pad_token_id=END)


def qwen3_next_config() -> Qwen3NextConfig:
    """A 4-layer Qwen3-Next, every layer full attention and MoE (4 experts, top-2, a shared expert)."""
    return Qwen3NextConfig(
        vocab_size=VOCAB_SIZE, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=2, head_dim=HIDDEN // HEADS, num_experts=EXPERTS,
        num_experts_per_tok=2, moe_intermediate_size=MOE_INTERMEDIATE, shared_expert_intermediate_size=MOE_INTERMEDIATE,
        decoder_sparse_step=1, layer_types=["full_attention"] * LAYERS, max_position_embeddings=CONTEXT,
        num_nextn_predict_layers=1, rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=None, eos_token_id=END,
        pad_token_id=END)


def build_mtp_toy(out_dir: str | Path, *, seed: int = 0) -> MtpToy:
    """Train and write ``out_dir/target`` and ``out_dir/qwen3-next`` (``out_dir`` must not exist)."""
    out_dir = Path(out_dir)
    with train.building(out_dir) as tmp:
        _build(tmp / "target", target_config(), MtpConfig("deepseek", f"model.layers.{LAYERS}.", 1, VOCAB_SIZE,
                                                          CONTEXT), seed)
        _build(tmp / "qwen3-next", qwen3_next_config(), MtpConfig("qwen3_next", "mtp.", 1, VOCAB_SIZE, CONTEXT), seed)
    return _layout(out_dir)


def _layout(folder: Path) -> MtpToy:
    return MtpToy(folder / "target", folder / "qwen3-next")


def _build(folder: Path, config: PretrainedConfig, head_config: MtpConfig, seed: int) -> None:
    model, tokens, gen = train.trained_target(config, seed, steps=TARGET_STEPS, batch=BATCH, length=LENGTH,
                                              train_bytes=TRAIN_BYTES)
    quiet = lambda _: None  # noqa: E731
    runner = TargetRunner(model, final_hidden=True)
    windows = train.random_windows(tokens, FEATURE_WINDOWS, LENGTH, gen)
    feats, logits = train.target_features(runner, windows, quiet)

    head = MtpDrafter(model, head_config, mtp_rules("sglang", head_config.style),
                      embed_tokens=runner.embed_tokens, lm_head=runner.lm_head)
    head.decoder.load_state_dict(model.model.layers[-1].state_dict())  # a warm start from the last layer
    with torch.no_grad():
        for norm in (head.embed_norm, head.hidden_norm):
            norm.weight.uniform_(0.25, 2.0, generator=gen)
    _train_head(head, windows, feats, logits, gen)

    model.save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    _add_mtp_shard(folder, head.checkpoint_tensors())


def _train_head(head: MtpDrafter, ids: torch.Tensor, feats: torch.Tensor, logits: torch.Tensor,
                gen: torch.Generator) -> None:
    """Row t reads token t + 1 and the target's hidden state at t and learns the target's distribution of
    token t + 2; unrolled step j feeds the row's previous output back, one position further on."""
    params = [p for name, p in head.named_parameters() if not name.startswith(("embed_tokens.", "lm_head."))]
    opt = torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=HEAD_STEPS, pct_start=0.1)
    head.train()
    n = ids.shape[1] - UNROLL
    rows, causal, eye = torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril(), torch.eye(n, dtype=torch.bool)
    for _ in range(HEAD_STEPS):
        pick = torch.randint(0, ids.shape[0], (BATCH,), generator=gen)
        x, hidden, target, past = ids[pick], feats[pick, :n], logits[pick], None
        loss = torch.zeros(())
        for j in range(UNROLL):
            mask = torch.cat([causal] + [eye] * j, dim=1)[None]
            out, hidden, kv = head.forward_masked(x[:, 1 + j:1 + j + n], hidden, (rows + j).expand(BATCH, n), mask,
                                                  past)
            past = kv if past is None else [(torch.cat([past[0][0], kv[0][0]], -2),
                                             torch.cat([past[0][1], kv[0][1]], -2))]
            want = target[:, 1 + j:1 + j + n].softmax(-1)
            loss = loss + 0.8 ** j * -(want * out.log_softmax(-1)).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        sched.step()
    head.eval()


def _add_mtp_shard(folder: Path, tensors: dict[str, torch.Tensor]) -> None:
    """The head's tensors in a second shard beside the target's, and the index naming both."""
    first, second = (folder / name for name in SHARDS)
    (folder / "model.safetensors").rename(first)
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(second))
    with safe_open(str(first), framework="pt") as f:
        weight_map = {name: SHARDS[0] for name in f.keys()}
    weight_map.update({name: SHARDS[1] for name in tensors})
    size = first.stat().st_size + second.stat().st_size
    write_json_atomic(folder / "model.safetensors.index.json",
                      {"metadata": {"total_size": size}, "weight_map": dict(sorted(weight_map.items()))})


def cached_mtp_toy(seed: int = 0) -> MtpToy:
    """The toy MTP target under the draftlab cache, built on first use (keyed by version, seed and Python)."""
    key = f"toy-mtp-v{MTP_TOY_VERSION}-seed{seed}-py{sys.version_info.major}{sys.version_info.minor}"
    folder = cache_root() / key
    toy = _layout(folder)
    if not all((d / "model.safetensors.index.json").is_file() for d in (toy.target_dir, toy.qwen3_next_dir)):
        build_mtp_toy(folder, seed=seed)
    return toy
