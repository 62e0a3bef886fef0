"""How many sequences the probe runs together when ``--batch-size`` is not given: as many as free
device memory holds, by an estimate of one sequence's peak memory in the probe's largest phases.

Decoding the continuations is bound by reading the weights, so a step over 64 rows costs little more
than a step over one: the wider the batch, the faster. The probe's own passes (one target pass over
prompt + continuation, the drafter over every cycle start) are compute-bound and gain nothing beyond
a few thousand tokens a pass, but they must fit too. On the CPU the batch stays small: there every
row costs its full compute.
"""

from __future__ import annotations

import torch

from draftlab.engines.sglang_flags import SpecFlags
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.graphs import BUCKETS
from draftlab.models.mtp import MtpDrafter
from draftlab.models.target import TargetRunner

CPU_BATCH = 4
MAX_BATCH = 64  # past this a decode step stops being bound by the weights (an 8B model in bf16 on an H200)
MEMORY_SHARE = 0.6  # of the free memory, for the estimate's slack and the allocator's fragmentation


def auto_batch_size(runner: TargetRunner, drafter: Eagle3Drafter | MtpDrafter, configs: list[SpecFlags], longest: int,
                    count: int) -> int:
    """The batch for ``count`` sequences of at most ``longest`` tokens (prompt + continuation)."""
    if runner.device.type != "cuda":
        return max(1, min(CPU_BATCH, count))
    free, _ = torch.cuda.mem_get_info(runner.device)
    fits = int(MEMORY_SHARE * free // row_bytes(runner, drafter, configs, longest))
    return max(1, min(MAX_BATCH, count, fits))


def cache_bytes_per_token(runner: TargetRunner) -> int:
    """Bytes the target's own KV cache holds per token, all layers: measured by a two-token forward, since
    what an MLA target (DeepSeek-V3, Kimi) caches depends on the transformers release (5.25 caches the
    compressed latent; expanded keys and values are several times that) and its config's head_dim (the
    rope width) gives neither. The forward is HF's on its own attention (a static runner lends it)."""
    device = runner.model.get_input_embeddings().weight.device
    with torch.inference_mode(), runner.hf_pass():
        cache = runner.model(torch.zeros(1, 2, dtype=torch.long, device=device), use_cache=True).past_key_values
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers if layer.keys is not None) // 2


def row_bytes(runner: TargetRunner, drafter: Eagle3Drafter | MtpDrafter, configs: list[SpecFlags],
              length: int) -> int:
    """Peak bytes one sequence of ``length`` tokens adds in the probe's largest phase."""
    cfg = runner.model.config
    size = torch.finfo(runner.dtype).bits // 8
    hidden = cfg.hidden_size
    intermediate = getattr(cfg, "intermediate_size", 4 * hidden)
    per_token = cache_bytes_per_token(runner)
    cache = per_token * (length + BUCKETS[-1])
    aux = len(runner.aux_layers)
    target_pass = length * ((aux + 8) * hidden + 3 * intermediate) * size
    logits = min(length, 512) * cfg.vocab_size * size * 2  # a chunk of the target's argmax
    draft_vocab = drafter.lm_head.out_features
    if isinstance(drafter, MtpDrafter):
        # one target layer's cache, averaged over its layers: MLA's latent on DeepSeek-V3; on Qwen3-Next, whose
        # linear-attention layers cache no keys, less than a full-attention layer's (within MEMORY_SHARE's slack)
        draft_kv = per_token // cfg.num_hidden_layers
    else:  # an MLA drafter's: 128 heads
        draft_kv = 2 * drafter.config.num_key_value_heads * drafter.config.head_dim * size
    drafting = max(flags.topk * length * (2 * draft_vocab * (size + 4) + flags.steps * (4 * hidden * size + draft_kv))
                   for flags in configs)
    return max(cache, target_pass + logits, drafting) + aux * hidden * length * size
