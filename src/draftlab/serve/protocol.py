"""Request parsing and response shapes of the APIs ``draftlab serve`` speaks (pure, no I/O).

OpenAI ``/v1/completions`` and ``/v1/chat/completions`` (streaming chunks, the final usage chunk
with ``stream_options.include_usage``), SGLang's native ``/generate`` (cumulative ``text`` and
``output_ids``, ``meta_info`` with ``spec_verify_ct``), SGLang's ``/get_server_info`` and a
Prometheus ``/metrics`` with vLLM's spec-decode counter names. Defaults follow each API: OpenAI
max_tokens 16 and temperature 1.0, SGLang max_new_tokens 128 and temperature 1.0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from draftlab.engines.metrics import (
    VLLM_ACCEPTED_PER_POS,
    VLLM_NUM_ACCEPTED,
    VLLM_NUM_DRAFT_TOKENS,
    VLLM_NUM_DRAFTS,
)
from draftlab.serve.engine import SpecCounters


class BadRequest(Exception):
    """The request cannot be served; the message goes back to the client with HTTP 400."""


@dataclass(frozen=True)
class ParsedRequest:
    """A generation request in any API, before tokenization."""

    api: str  # "completions", "chat" or "generate"
    text: str | None
    messages: list[dict[str, Any]] | None
    input_ids: list[int] | None
    max_new_tokens: int
    temperature: float
    ignore_eos: bool
    seed: int | None
    stream: bool
    include_usage: bool


def _number(body: dict[str, Any], key: str, default: float, *, integer: bool = False, low: float = 0) -> Any:
    value = body.get(key, default)
    if value is None:
        value = default
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value) or value < low:
        raise BadRequest(f"'{key}' must be a {'whole ' if integer else ''}number >= {low}, got {value!r}")
    return value


def _token_ids(value: Any, key: str) -> list[int]:
    if not value or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        raise BadRequest(f"'{key}' must be a non-empty list of token ids")
    return list(value)


def parse_request(api: str, body: Any) -> ParsedRequest:
    """Validate a JSON body for ``api``; BadRequest says which field is wrong."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    text = messages = input_ids = None
    if api == "generate":
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise BadRequest("'sampling_params' must be an object")
        if body.get("input_ids") is not None:
            input_ids = _token_ids(body["input_ids"], "input_ids")
        elif isinstance(body.get("text"), str):
            text = body["text"]
        else:
            raise BadRequest("give 'text' (a string) or 'input_ids' (one list of token ids)")
        max_new = _number(params, "max_new_tokens", 128, integer=True, low=1)
        temperature = _number(params, "temperature", 1.0)
        ignore_eos = bool(params.get("ignore_eos", False))
        seed = params.get("sampling_seed")
        include_usage = False
    else:
        if body.get("n", 1) != 1:
            raise BadRequest("only n = 1 is supported (the reference decoder is batch 1)")
        if api == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
                raise BadRequest("'messages' must be a non-empty list of {role, content} objects")
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, str):
                text = prompt
            elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                input_ids = _token_ids(prompt, "prompt")
            else:
                raise BadRequest("'prompt' must be a string or one list of token ids")
        key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        max_new = _number(body, key, 16, integer=True, low=1)
        temperature = _number(body, "temperature", 1.0)
        ignore_eos = bool(body.get("ignore_eos", False))
        seed = body.get("seed")
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage", False)) if isinstance(options, dict) else False
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise BadRequest(f"the seed must be an integer from 0 to 2**63 - 1, got {seed!r}")
    return ParsedRequest(api, text, messages, input_ids, max_new, float(temperature), ignore_eos, seed,
                         bool(body.get("stream", False)), include_usage)


def check_tokens(input_ids: list[int], max_new_tokens: int, context: int | None, vocab_size: int | None) -> None:
    """Refuse what the target cannot run, as SGLang does (HTTP 400): token ids outside its vocabulary,
    a prompt that fills its context, a prompt plus ``max_new_tokens`` that reaches it."""
    if vocab_size is not None and any(t >= vocab_size for t in input_ids):
        bad = next(t for t in input_ids if t >= vocab_size)
        raise BadRequest(f"token id {bad} is outside the model's vocabulary of {vocab_size} tokens")
    if context is None:
        return
    if len(input_ids) >= context:
        raise BadRequest(f"The input ({len(input_ids)} tokens) is longer than the model's context length "
                         f"({context} tokens).")
    if len(input_ids) + max_new_tokens >= context:
        raise BadRequest(
            f"Requested token count exceeds the model's maximum context length of {context} tokens. You requested "
            f"a total of {len(input_ids) + max_new_tokens} tokens: {len(input_ids)} tokens from the input messages "
            f"and {max_new_tokens} tokens for the completion. Please reduce the number of tokens in the input "
            "messages or the completion to fit within the limit.")


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def openai_chunk(api: str, rid: str, model: str, created: int, text: str, finish: str | None,
                 *, first: bool = False) -> dict[str, Any]:
    """One streamed choice: ``delta`` for chat, ``text`` for completions."""
    if api == "chat":
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        kind = "text_completion"
    return {"id": rid, "object": kind, "created": created, "model": model, "choices": [choice]}


def openai_usage_chunk(api: str, rid: str, model: str, created: int, use: dict[str, int]) -> dict[str, Any]:
    kind = "chat.completion.chunk" if api == "chat" else "text_completion"
    return {"id": rid, "object": kind, "created": created, "model": model, "choices": [], "usage": use}


def openai_response(api: str, rid: str, model: str, created: int, text: str, finish: str,
                    use: dict[str, int]) -> dict[str, Any]:
    if api == "chat":
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "logprobs": None, "finish_reason": finish}
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        kind = "text_completion"
    return {"id": rid, "object": kind, "created": created, "model": model, "choices": [choice], "usage": use}


def generate_meta(rid: str, prompt_tokens: int, completion_tokens: int, finish: dict[str, Any] | None,
                  verify_ct: int | None, correct_drafts: int | None, drafted_per_cycle: int) -> dict[str, Any]:
    """SGLang's ``meta_info``; the spec fields only when speculating, as SGLang does."""
    meta: dict[str, Any] = {"id": rid, "finish_reason": finish, "prompt_tokens": prompt_tokens,
                            "completion_tokens": completion_tokens, "cached_tokens": 0}
    if verify_ct is not None:
        meta["spec_verify_ct"] = verify_ct
        meta["spec_num_correct_drafts"] = correct_drafts
        meta["spec_num_proposed_drafts"] = verify_ct * drafted_per_cycle
        # SGLang's own per-request number: completion tokens (prefill token included) per verify pass
        meta["spec_accept_length"] = completion_tokens / verify_ct if verify_ct else None
    return meta


def server_info(model_path: str, spec: dict[str, int] | None, counters: SpecCounters) -> dict[str, Any]:
    """SGLang's ``/get_server_info``: the cumulative average sits in ``internal_states[0]``."""
    state: dict[str, Any] = {}
    if spec is not None:
        state["avg_spec_accept_length"] = counters.avg_accept_length
    info: dict[str, Any] = {"model_path": model_path, "speculative_algorithm": "EAGLE3" if spec else None,
                            "internal_states": [state], "version": "draftlab"}
    if spec is not None:
        info.update({f"speculative_{k}": v for k, v in spec.items()})
    return info


def prometheus_metrics(model: str, counters: SpecCounters, speculative: bool) -> str:
    """vLLM's spec-decode counters (``_total`` suffix) plus its token and finished-request counters."""
    label = f'model_name="{model}"'
    lines = ["# HELP vllm:prompt_tokens Number of prefill tokens processed.",
             "# TYPE vllm:prompt_tokens counter",
             f"vllm:prompt_tokens_total{{{label}}} {counters.prompt_tokens}",
             "# HELP vllm:generation_tokens Number of generation tokens processed.",
             "# TYPE vllm:generation_tokens counter",
             f"vllm:generation_tokens_total{{{label}}} {counters.generation_tokens}",
             "# HELP vllm:request_success Count of successfully processed requests.",
             "# TYPE vllm:request_success counter"]
    lines += [f'vllm:request_success_total{{{label},finished_reason="{reason}"}} {counters.requests.get(reason, 0)}'
              for reason in ("stop", "length", "abort")]
    if speculative:
        for name, value, help_ in (
            (VLLM_NUM_DRAFTS, counters.num_drafts, "Number of spec decoding drafts."),
            (VLLM_NUM_DRAFT_TOKENS, counters.num_draft_tokens, "Number of draft tokens."),
            (VLLM_NUM_ACCEPTED, counters.num_accepted_tokens, "Number of accepted tokens."),
        ):
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} counter", f"{name}_total{{{label}}} {value}"]
        lines += [f"# HELP {VLLM_ACCEPTED_PER_POS} Accepted tokens per draft position.",
                  f"# TYPE {VLLM_ACCEPTED_PER_POS} counter"]
        lines += [f'{VLLM_ACCEPTED_PER_POS}_total{{{label},position="{i}"}} {v}'
                  for i, v in enumerate(counters.accepted_per_pos)]
    return "\n".join(lines) + "\n"
