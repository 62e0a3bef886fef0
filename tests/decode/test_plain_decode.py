"""The plain batched decode loop (continuations, regenerate, ``generate --no-draft --batch-size``, the
server's K = 0 batches): HF's greedy tokens, rows ending at their own EOS or at the context, and no
read of the device inside its steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from tiny_targets import tiny_target  # noqa: E402

from draftlab.decode.plain_decode import CHECK_EVERY, plain_decode  # noqa: E402
from draftlab.errors import DraftlabError  # noqa: E402
from draftlab.models.target import TargetRunner  # noqa: E402
from draftlab.models.target_batch import BatchTarget  # noqa: E402
from draftlab.probe.continuations import target_continuations  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9], [11, 12, 13], [40, 41, 42, 43]]
READS = {"item", "tolist", "__int__", "__bool__", "__float__", "__index__"}


class CountReads(TorchFunctionMode):
    """Counts the tensor methods that copy a value from the device to the host (a sync on CUDA)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.reads += getattr(func, "__name__", "") in READS
        return func(*args, **(kwargs or {}))


def _no_cache_greedy(prompt: list[int], n: int) -> list[int]:
    """HF's own model, a full forward per token (an unfused copy of the same weights)."""
    model = tiny_target("llama")
    seq = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(prompt):]


@pytest.fixture(scope="module")
def target() -> BatchTarget:
    return BatchTarget(TargetRunner(tiny_target("llama"), cache="dynamic"), len(PROMPTS), 64)


def test_steps_read_nothing_back_and_tokens_are_hfs_greedy(target):
    expected = [_no_cache_greedy(p, 40) for p in PROMPTS]
    with CountReads() as counter:
        tokens = plain_decode(target, PROMPTS, 40)
    assert tokens == expected
    assert counter.reads == 1  # the tokens, once, at the end
    with CountReads() as counter:
        plain_decode(target, PROMPTS, 40, eos={-1})
    assert counter.reads == -(-39 // CHECK_EVERY)  # with an EOS to stop at: once per chunk of steps


def test_rows_end_at_their_own_eos(target):
    free = [_no_cache_greedy(p, 30) for p in PROMPTS]
    end = next(i for i, t in enumerate(free[0]) if i >= 4 and t not in free[0][:i] and t not in free[1])
    eos = free[0][end]  # a token only row 0 produces, first at `end`
    rows = plain_decode(target, PROMPTS, 30, eos={eos})
    cut = [row[:row.index(eos) + 1] if eos in row else row for row in free]
    assert rows == cut and len(rows[0]) == end + 1 and len(rows[1]) == 30
    heard: dict[int, list[int]] = {}
    streamed = plain_decode(target, PROMPTS, 30, eos={eos}, on_tokens=lambda r, t: heard.setdefault(r, []).extend(t))
    assert streamed == cut and [heard[i] for i in range(len(PROMPTS))] == cut


def test_rows_end_at_the_context_and_forward_refuses_past_it():
    runner = TargetRunner(tiny_target("llama"), cache="dynamic")  # a context of 256 positions
    long = [7] * 250
    prompts = [long, [5, 6, 7]]
    rows = plain_decode(BatchTarget(runner, 2, 300), prompts, 20)
    assert rows == [_no_cache_greedy(long, 7), _no_cache_greedy([5, 6, 7], 20)]  # positions 250..255 fed
    assert target_continuations(runner, [long], 7, batch_size=1) == [rows[0]]
    # more than the context leaves room for: the continuation stops there (the probe cuts it to the room)
    assert target_continuations(runner, [long, [5, 6, 7]], 20, batch_size=2) == rows
    batch = BatchTarget(runner, 1, 300)
    with pytest.raises(DraftlabError, match="position 256 is past"):
        batch.forward(torch.tensor([[1]]), torch.tensor([[256]]))
    with pytest.raises(DraftlabError, match="position 300 is past"):
        batch.forward(torch.tensor([[1]]), torch.tensor([[3]]), max_position=300)


@pytest.mark.parametrize("batch_size", [1, 2])
def test_generate_without_a_drafter_runs_on_a_target_too_short_for_the_default_aux_layers(tmp_path, batch_size):
    """Plain decoding captures no aux layer: a 3-layer target (whose default aux layers [1, 0, -1] do not exist)
    decodes, as any target does."""
    import json

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from builders import tiny_target_config

    from draftlab.checkpoint.synth import write_target
    from draftlab.decode.generate import generate

    config = tiny_target_config("llama") | {"num_hidden_layers": 3}
    target = write_target(tmp_path / "target", config)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": ids}) + "\n" for ids in ([3, 4, 5], [6, 7, 8, 9])))
    result = generate(target, None, prompts, no_draft=True, max_new_tokens=4, batch_size=batch_size,
                      ignore_eos=True, progress=False)
    assert [len(r.output_ids) for r in result.results] == [4, 4]
