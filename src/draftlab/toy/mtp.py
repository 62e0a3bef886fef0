"""The toy MTP target: a tiny byte-level DeepSeek-V3 (MLA with YaRN, MoE past its first layer, grouped
routing) that ships one MTP layer as DeepSeek-V3 does (``num_nextn_predict_layers: 1``; ``model.layers.4.``
with ``enorm``, ``hnorm``, ``eh_proj``, ``shared_head.norm`` and an MLA + MoE decoder layer; no
``embed_tokens`` or ``shared_head.head`` of its own: the target's), its weights in a second shard under
``model.safetensors.index.json``, as published checkpoints hold them.

The target is trained for seconds like :mod:`draftlab.toy.mla`'s; the head on the target's own final
hidden states, the next token's distribution two ahead, with two unrolled steps that feed its output back
as SGLang does (so deeper drafts accept now and then). Its enorm/hnorm weights start far from one, so
dropping either norm changes what it drafts.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import DeepseekV3Config

from draftlab.engines.mtp_head import mtp_rules
from draftlab.fsutil import write_json_atomic
from draftlab.models.mtp import MtpConfig, MtpDrafter
from draftlab.models.target import TargetRunner
from draftlab.toy import train
from draftlab.toy.mla import KV_LORA, NOPE, Q_LORA, ROPE, V_HEAD, YARN
from draftlab.toy.pair import BATCH, CONTEXT, LENGTH, TRAIN_BYTES, cache_root
from draftlab.toy.tokenizer import END, VOCAB_SIZE, byte_tokenizer

MTP_TOY_VERSION = "1"  # bump when anything below changes what gets built
HIDDEN, LAYERS, HEADS, INTERMEDIATE, EXPERTS, MOE_INTERMEDIATE = 64, 4, 4, 192, 4, 48
TARGET_STEPS, HEAD_STEPS, FEATURE_WINDOWS, UNROLL = 500, 150, 192, 2
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


@dataclass(frozen=True)
class MtpToy:
    target_dir: Path  # the target with its MTP layer


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


def build_mtp_toy(out_dir: str | Path, *, seed: int = 0) -> MtpToy:
    """Train and write ``out_dir/target`` (``out_dir`` must not exist)."""
    out_dir = Path(out_dir)
    with train.building(out_dir) as tmp:
        _build(tmp, seed)
    return MtpToy(out_dir / "target")


def _build(tmp: Path, seed: int) -> None:
    model, tokens, gen = train.trained_target(target_config(), seed, steps=TARGET_STEPS, batch=BATCH, length=LENGTH,
                                              train_bytes=TRAIN_BYTES)
    quiet = lambda _: None  # noqa: E731
    runner = TargetRunner(model, final_hidden=True)
    windows = train.random_windows(tokens, FEATURE_WINDOWS, LENGTH, gen)
    feats, logits = train.target_features(runner, windows, quiet)

    head = MtpDrafter(model.config, MtpConfig("deepseek", f"model.layers.{LAYERS}.", 1, VOCAB_SIZE, CONTEXT),
                      mtp_rules("sglang", "deepseek"), embed_tokens=runner.embed_tokens, lm_head=runner.lm_head)
    head.decoder.load_state_dict(model.model.layers[-1].state_dict())  # a warm start from the last layer
    with torch.no_grad():
        for norm in (head.embed_norm, head.hidden_norm):
            norm.weight.uniform_(0.25, 2.0, generator=gen)
    _train_head(head, windows, feats, logits, gen)

    folder = tmp / "target"
    model.save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    _add_mtp_shard(folder, head)


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


def _add_mtp_shard(folder: Path, head: MtpDrafter) -> None:
    """The head's tensors under DeepSeek-V3's names (per-expert weights) in a second shard, and the index."""
    prefix = head.config.layer
    tensors = {f"{prefix}enorm.weight": head.embed_norm.weight, f"{prefix}hnorm.weight": head.hidden_norm.weight,
               f"{prefix}eh_proj.weight": head.proj.weight, f"{prefix}shared_head.norm.weight": head.final_norm.weight}
    for name, tensor in head.decoder.state_dict().items():
        if name == "mlp.experts.gate_up_proj":
            for e, both in enumerate(tensor):
                gate, up = both.chunk(2)
                tensors[f"{prefix}mlp.experts.{e}.gate_proj.weight"] = gate
                tensors[f"{prefix}mlp.experts.{e}.up_proj.weight"] = up
        elif name == "mlp.experts.down_proj":
            for e, down in enumerate(tensor):
                tensors[f"{prefix}mlp.experts.{e}.down_proj.weight"] = down
        else:
            tensors[prefix + name] = tensor
    first, second = (folder / name for name in SHARDS)
    (folder / "model.safetensors").rename(first)
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(second))
    from safetensors import safe_open

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
    if not (folder / "target" / "model.safetensors.index.json").is_file():
        build_mtp_toy(folder, seed=seed)
    return MtpToy(folder / "target")
