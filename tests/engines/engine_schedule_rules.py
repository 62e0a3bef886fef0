"""Each engine's own reading of a batch-size schedule, rewritten here from its source (not imported:
none of the engines is installed) so that draftlab's writer is checked against the engine, not itself.

- vLLM 0.24.0-0.34.0, ``vllm/v1/spec_decode/dynamic/utils.py``: ``validate_and_normalize_dynamic_sd_schedule``
  and ``build_dynamic_sd_schedule_lookup`` (the key sits in ``vllm/config/speculative.py``'s
  ``SpeculativeConfig.num_speculative_tokens_per_batch_size``).
- SGLang (per-batch-size slots, 0.5.13+; read at sgl-project/sglang main), ``srt/speculative/
  adaptive_spec_params.py``: ``_load_adaptive_config``, ``AdaptiveStepSlot.__init__``, and
  ``adaptive_step_router.py``: ``AdaptiveStepRouter.batch_size_key_for_batch``.
- TensorRT-LLM (upper-bound reading, PR #10860), ``tensorrt_llm/llmapi/llm_args.py``:
  ``DecodingBaseConfig.validate_draft_len_schedule_and_sort`` and ``EagleDecodingConfig.validate_eagle_config``
  (max_draft_len > 0); ``tensorrt_llm/_torch/speculative/utils.py``: ``get_draft_len_for_batch_size``.
"""

from __future__ import annotations

import bisect


def vllm_dense(schedule: object, max_num_seqs: int, num_speculative_tokens: int) -> list[int]:
    """vLLM's dense K table, index = batch size (0 unused); ValueError where vLLM raises."""
    if not isinstance(schedule, list) or not schedule:
        raise ValueError("must be a non-empty list")
    if num_speculative_tokens <= 0 or max_num_seqs <= 0:
        raise ValueError("num_speculative_tokens and max_num_seqs must be > 0")
    parsed = []
    for entry in schedule:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ValueError("each entry is a 3-item sequence")
        lo, hi, k = (int(x) for x in entry)
        if lo <= 0 or hi <= 0 or lo > hi or k < 0:
            raise ValueError(f"bad range {entry}")
        parsed.append((lo, hi, k))
    parsed.sort(key=lambda e: e[0])
    end = 0
    for lo, hi, _ in parsed:
        if lo <= end:
            raise ValueError("ranges overlap")
        end = hi
    if parsed[0][0] != 1:
        raise ValueError("the first range must start at 1")
    dense = [0] * (max_num_seqs + 1)
    nxt, last = 1, None
    for lo, hi, k in parsed:
        if lo > nxt and last is not None:  # a gap keeps the previous K
            for b in range(nxt, min(lo, max_num_seqs + 1)):
                dense[b] = min(num_speculative_tokens, last)
        for b in range(max(lo, nxt), min(hi, max_num_seqs) + 1):
            dense[b] = min(num_speculative_tokens, k)
        nxt, last = max(nxt, hi + 1), k
        if nxt > max_num_seqs:
            break
    for b in range(nxt, max_num_seqs + 1):  # the tail keeps the last K
        dense[b] = min(num_speculative_tokens, last)
    return dense


def sglang_steps(config: dict, batch_size: int, num_steps: int, cuda_graph_bs: list[int] | None = None) -> int:
    """The steps SGLang's adaptive router runs at ``batch_size`` right after start-up."""
    slots = {}
    for key, entry in config.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise ValueError(f"BS {key}: candidate_steps must be a list of non-negative ints")
        slots[int(key)] = sorted(set(steps))
    if not slots:
        raise ValueError("at least one integer-string BS key")
    union = sorted({s for c in slots.values() for s in c})
    if num_steps not in union:  # speculative_hook: --speculative-num-steps must be a candidate
        raise ValueError("speculative_num_steps must be one of the candidate steps")
    if cuda_graph_bs:
        i = bisect.bisect_left(sorted(cuda_graph_bs), batch_size)
        if i < len(cuda_graph_bs):
            batch_size = sorted(cuda_graph_bs)[i]
    keys = sorted(slots)
    candidates = slots[keys[max(0, bisect.bisect_right(keys, batch_size) - 1)]]
    return num_steps if num_steps in candidates else candidates[len(candidates) // 2]


def trtllm_draft_len(config: dict, batch_size: int) -> int:
    """TensorRT-LLM's draft length at ``batch_size``; ValueError where its validators raise."""
    top = config["max_draft_len"]
    if top is None or top == 0:
        raise ValueError("max_draft_len must be > 0 for Eagle")
    table = {int(k): v for k, v in config["draft_len_schedule"].items()}  # pydantic: dict[int, int]
    for b, k in table.items():
        if b < 1 or k < 0:
            raise ValueError("keys >= 1, values >= 0")
    smallest = min(table)
    if table[smallest] != top:
        raise ValueError(f"draft_len_schedule[{smallest}] must equal max_draft_len")
    if any(k > top for k in table.values()):
        raise ValueError("all draft lengths must be <= max_draft_len")
    keys = sorted(table)
    i = bisect.bisect_left(keys, batch_size)
    return table[keys[i]] if i < len(keys) else 0
