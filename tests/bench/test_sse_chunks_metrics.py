"""Pure parts of the client: SSE framing, per-API chunk reading, engine metric parsing, stats."""

from __future__ import annotations

import json

import pytest

from draftlab.bench.chunks import MalformedStream, StreamState, read_chunk
from draftlab.bench.sse import SSEDecoder
from draftlab.bench.stats import summarize_ms
from draftlab.engines.metrics import (
    VllmSpecCounters,
    sglang_meta_accept_length,
    sglang_server_accept_length,
    vllm_delta,
)

STREAM = (b'data: {"a": 1}\r\n\r\n: keep-alive comment\n\nevent: x\ndata: {"b":\ndata:  2}\n\n'
          b"data: caf\xc3\xa9\n\ndata: [DONE]\n\n")
EXPECTED = ['{"a": 1}', '{"b":\n 2}', "café", "[DONE]"]


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)])
def test_sse_any_split(size):
    dec = SSEDecoder()
    events = []
    for i in range(0, len(STREAM), size):  # splits inside \r\n and inside the two-byte é
        events += dec.feed(STREAM[i : i + size])
    assert events + dec.close() == EXPECTED


def test_sse_unterminated_last_event_flushed_on_close():
    dec = SSEDecoder()
    assert dec.feed(b"data: tail") == []
    assert dec.close() == ["tail"]


def test_openai_tokens_come_from_usage_not_chunks():
    state = StreamState()
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    multi = {"choices": [{"index": 0, "delta": {"content": "three tokens here"}}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}}
    assert read_chunk("openai-chat", json.dumps(role), state) is False
    assert read_chunk("openai-chat", json.dumps(multi), state) is True
    assert read_chunk("openai-chat", json.dumps(usage), state) is False
    read_chunk("openai-chat", "[DONE]", state)
    assert (state.output_chunks, state.completion_tokens, state.done) == (1, 7, True)


def test_sglang_counts_cumulative_completion_tokens():
    state = StreamState()
    for n, new in ((1, True), (4, True), (4, False), (6, True)):
        chunk = {"text": "x" * n, "meta_info": {"completion_tokens": n, "spec_verify_ct": 2}}
        assert read_chunk("sglang", json.dumps(chunk), state) is new
    assert state.completion_tokens == 6 and state.meta["spec_verify_ct"] == 2


@pytest.mark.parametrize("api,payload,needle", [
    ("openai", "{not json", "not JSON"),
    ("openai", '{"object": "x"}', "choices"),
    ("openai-chat", '{"error": {"message": "boom"}}', "boom"),
    ("sglang", '{"text": "a"}', "completion_tokens"),
])
def test_malformed_chunks(api, payload, needle):
    with pytest.raises(MalformedStream, match=needle):
        read_chunk(api, payload, StreamState())


VLLM_BEFORE = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 80.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 50.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 20.0
"""


def test_vllm_counter_deltas():
    before = VllmSpecCounters.from_prometheus(VLLM_BEFORE)
    after_text = (VLLM_BEFORE.replace("} 100.0", "} 140.0").replace("} 150.0", "} 230.0")
                  .replace("} 80.0", "} 115.0").replace("} 50.0", "} 80.0").replace("} 20.0", "} 35.0"))
    after = VllmSpecCounters.from_prometheus(after_text)
    summary = vllm_delta(before, after)
    # 40 drafts, 80 accepted: AL = 1 + 80 / 40; per position 35/40, 30/40, 15/40
    assert summary.accept_length == pytest.approx(3.0)
    assert summary.acceptance_by_position == pytest.approx([0.875, 0.75, 0.375])
    assert VllmSpecCounters.from_prometheus("vllm:num_requests_running 3\n") is None


def test_sglang_meta_accept_length_exact_and_fallback():
    exact = [{"spec_verify_ct": 4, "spec_num_correct_drafts": 6, "completion_tokens": 11},
             {"spec_verify_ct": 2, "spec_num_correct_drafts": 1, "completion_tokens": 4}]
    assert sglang_meta_accept_length(exact) == pytest.approx(1 + 7 / 6)
    older = [{"spec_verify_ct": 4, "completion_tokens": 11}]  # no draft counts: drop the prefill token
    assert sglang_meta_accept_length(older) == pytest.approx(10 / 4)
    assert sglang_meta_accept_length([{"completion_tokens": 5}]) is None
    assert sglang_server_accept_length({"internal_states": [{"avg_spec_accept_length": 2.5}]}) == 2.5
    assert sglang_server_accept_length({"internal_states": [{}]}) is None


def test_summary_percentiles():
    stats = summarize_ms([0.001 * i for i in range(1, 101)])
    assert stats["mean"] == pytest.approx(50.5)
    assert stats["p50"] == pytest.approx(50.5) and stats["p99"] == pytest.approx(99.01)
    assert summarize_ms([]) == {"mean": None, "p50": None, "p90": None, "p99": None}
