"""TargetRunner.forward_batch: the probe's one target pass equals the runner's own per-sequence pass."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from tiny_targets import tiny_target  # noqa: E402

from draftlab.models.target import TargetRunner  # noqa: E402


@pytest.mark.parametrize("family", ["llama", "gpt_oss"])
def test_batched_pass_matches_single_sequence_pass_with_right_padding(family):
    runner = TargetRunner(tiny_target(family), aux_layers=[0, 2, 3])
    torch.manual_seed(0)
    long, short = torch.randint(0, 97, (12,)), torch.randint(0, 97, (7,))
    batch = torch.stack([long, torch.cat([short, torch.zeros(5, dtype=torch.long)])])
    out = runner.forward_batch(batch)
    for row, ids in enumerate([long, short]):
        runner.reset()
        ref = runner.forward(ids)
        n = ids.numel()
        torch.testing.assert_close(out.aux[row, :n], ref.aux, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(runner.lm_head(out.hidden[row, :n]).float(), ref.logits, atol=1e-5, rtol=1e-5)
    assert runner.cache_len == 7  # the batched pass left the runner's cache as the last forward made it


def test_continuations_read_only_the_filled_slots_in_read_buckets(monkeypatch):
    """Each decode step reads its row's filled slots rounded up to the 128-slot read bucket (one CUDA
    graph per bucket), not the whole cache; the tokens stay the target's greedy ones."""
    from draftlab.models.static_kv import BatchKV
    from draftlab.probe.continuations import target_continuations

    runner = TargetRunner(tiny_target("llama"), aux_layers=[0, 2, 3])
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
    widths: list[int] = []
    begin = BatchKV.begin
    monkeypatch.setattr(BatchKV, "begin", lambda self, slots, read_end: (widths.append(read_end),
                                                                         begin(self, slots, read_end))[1])
    tokens = target_continuations(runner, prompts, 150, batch_size=2)
    slots = 5 + 150 + 64  # the capacity and room for one padded block
    # the prefill (5 slots) and 149 decode steps, step s writing slot s
    assert widths == [128] + [min(slots, -(-(s + 1) // 128) * 128) for s in range(5, 154)]
    reference = []
    for prompt in prompts:  # the runner's own batch-1 decode
        runner.reset()
        out = runner.forward(torch.tensor(prompt))
        row = [int(out.logits[-1].argmax())]
        for _ in range(149):
            row.append(int(runner.forward(torch.tensor([row[-1]])).logits[-1].argmax()))
        reference.append(row)
    assert tokens == reference


def test_continuations_compile_only_decodes_long_enough_to_pay(monkeypatch):
    """torch.compile's set-up costs seconds a process: the continuations compile the layers' parts on
    CUDA only when their groups' steps add up to COMPILE_PAYS_AFTER, never on the CPU."""
    import draftlab.probe.continuations as continuations
    from draftlab.models.target_batch import COMPILE_PAYS_AFTER, BatchTarget, compile_pays
    from draftlab.probe.continuations import target_continuations

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert not compile_pays(COMPILE_PAYS_AFTER - 1, cuda) and compile_pays(COMPILE_PAYS_AFTER, cuda)
    assert not compile_pays(10 * COMPILE_PAYS_AFTER, cpu)

    planned: list[int] = []
    monkeypatch.setattr(continuations, "compile_pays", lambda steps, device: not planned.append(steps))
    built: list[bool] = []

    class Recording(BatchTarget):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self.compile)
            self.compile = False  # what was asked is recorded; the decode itself need not compile here

    monkeypatch.setattr(continuations, "BatchTarget", Recording)
    runner = TargetRunner(tiny_target("llama"), aux_layers=[0, 2, 3])
    target_continuations(runner, [[5, 6, 7], [8, 9], [10, 11, 12, 13]], 6, batch_size=2)
    assert planned == [2 * 6] and built == [True]  # two groups of two rows, six steps each
