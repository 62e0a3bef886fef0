"""The batched runtime's preallocated KV cache: in-place writes and packing, its capacity, and the
batched target's forward against the batch-1 runner for every family it supports."""

from __future__ import annotations

import pytest
import torch
from tiny_targets import COMMON, tiny_target

from draftlab.errors import DraftlabError
from draftlab.models.batch_slots import BatchSlots, gather_slots
from draftlab.models.static_kv import BatchKV
from draftlab.models.target import TargetRunner
from draftlab.models.target_batch import BatchTarget
from draftlab.models.target_static import FAMILIES

AUX = [0, 2, 4]


def _write(kv: BatchKV, slots: BatchSlots, positions: list[list[int]], valid: list[list[bool]],
           values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward's worth of writes: ``values`` [B, n] become every layer's keys (and -values)."""
    start, n = slots.length, values.shape[1]
    kv.begin(torch.arange(start, start + n), kv.pad(torch.ones(start + n, dtype=torch.bool)).shape[-1])
    new = values[:, None, :, None].expand(-1, kv.keys.shape[2], -1, kv.keys.shape[4])
    for layer in range(kv.keys.shape[0]):
        keys, vals = kv.update(new + 100 * layer, -(new + 100 * layer), layer)
    slots.append(torch.tensor(positions), torch.tensor(valid))
    return keys, vals


def test_keep_packs_each_rows_path_in_place() -> None:
    """Each row's kept entries move to the front of the appended block, in the buffers they were
    written to; the used slots then equal what gathering a growing cache gives."""
    kv = BatchKV(2, 2, 2, 3, 8, dtype=torch.float32, device=torch.device("cpu"))
    kv.read_bucket = 4
    slots = BatchSlots(2, torch.device("cpu"))
    pointers = (kv.keys.data_ptr(), kv.values.data_ptr())
    keys, _ = _write(kv, slots, [[0, 1], [0, 1]], [[False, True], [True, True]], torch.tensor([[1., 2.], [3., 4.]]))
    assert keys.untyped_storage().data_ptr() == kv.keys.untyped_storage().data_ptr()  # a view, not a copy
    assert keys.shape[2] == 4  # attention reads the used slots rounded up to the bucket
    _write(kv, slots, [[2, 3, 3], [2, 3, 4]], [[True] * 3] * 2, torch.tensor([[5., 6., 7.], [8., 9., 10.]]))
    grown = kv.keys[:, :, :, :5].clone()  # what a growing cache holds before keep
    start = slots.block_start
    index = slots.keep([[0, 2], [1]])
    kv.keep(start, index)
    assert (kv.keys.data_ptr(), kv.values.data_ptr()) == pointers
    want = torch.stack([gather_slots(layer, index) for layer in grown])
    torch.testing.assert_close(kv.keys[:, :, :, :slots.length], want, rtol=0, atol=0)
    torch.testing.assert_close(kv.values[:, :, :, :slots.length], -want, rtol=0, atol=0)
    assert kv.keys[1, :, 0, :4, 0].tolist() == [[101, 102, 105, 107], [103, 104, 109, 108]]
    # a dropped draft pass (keep of nothing) moves no entry; the next forward overwrites its slots
    _write(kv, slots, [[3], [3]], [[True], [True]], torch.tensor([[11.], [12.]]))
    kv.keep(slots.block_start, slots.keep([[], []]))
    keys, _ = _write(kv, slots, [[3], [3]], [[True], [True]], torch.tensor([[13.], [14.]]))
    assert keys.shape[2] == 8 and keys[:, 0, 4, 0].tolist() == [113, 114]  # 5 used, rounded up to the bucket
    torch.testing.assert_close(kv.keys[:, :, :, :4], want, rtol=0, atol=0)


def test_pad_hides_the_slots_read_past_the_used_ones() -> None:
    """A mask over the forward's used slots widens to the bucket it reads, at most every slot (the
    capacity plus room for one padded block); the extra slots are hidden."""
    kv = BatchKV(1, 2, 1, 4, 100, dtype=torch.float32, device=torch.device("cpu"))
    assert kv.read_bucket == 128 and kv.num_slots == 100 + 64
    allowed = torch.rand(2, 5, 65) > 0.5
    wide = kv.pad(allowed)
    assert wide.shape == (2, 5, 128) and wide.dtype == torch.bool
    assert torch.equal(wide[..., :65], allowed) and not wide[..., 65:].any()
    assert kv.pad(torch.ones(2, 5, 150, dtype=torch.bool)).shape == (2, 5, 164)


def test_capacity_overflow_is_one_clear_error() -> None:
    runner = TargetRunner(tiny_target("llama"), aux_layers=AUX, cache="dynamic")
    batch = BatchTarget(runner, 2, capacity=6)
    assert batch.static
    ids = torch.randint(0, COMMON["vocab_size"], (2, 4))
    batch.forward(ids, torch.arange(4).repeat(2, 1))
    with pytest.raises(DraftlabError, match="holds 6 slots per row and this forward needs 7") as err:
        batch.forward(ids[:, :3], 4 + torch.arange(3).repeat(2, 1))
    assert "\n" not in str(err.value)
    assert batch.slots.length == 4  # nothing recorded: a smaller forward still fits
    assert batch.forward(ids[:, :2], 4 + torch.arange(2).repeat(2, 1)).logits.shape == (2, 2, COMMON["vocab_size"])


@pytest.mark.parametrize("family", [*FAMILIES, "qwen3_moe"])
def test_batched_target_matches_the_batch_one_runner(family: str) -> None:
    """Left-padded prompts of different lengths (longer than mistral's window), then a tree verify
    with different kept paths, then a step: each row's logits and aux features are the batch-1
    runner's (aux = output of the canonical layers, as the runner's hooks capture them). A family
    the preallocated cache does not support (qwen3_moe) keeps the HF dynamic-cache path."""
    model = tiny_target(family)
    batched = BatchTarget(TargetRunner(model, aux_layers=AUX, cache="dynamic"), 2, capacity=32)
    assert batched.static == (family in FAMILIES)
    single = TargetRunner(tiny_target(family), aux_layers=AUX, cache="dynamic")
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, COMMON["vocab_size"], (n,), generator=gen) for n in (5, 11)]
    ids = torch.stack([torch.cat([p.new_zeros(11 - p.numel()), p]) for p in prompts])
    pads = torch.tensor([[6], [0]])
    positions = (torch.arange(11)[None] - pads).clamp(min=0)
    prefill = batched.forward(ids, positions, new_valid=torch.arange(11)[None] >= pads)
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    new = torch.randint(0, COMMON["vocab_size"], (2, 3), generator=gen)
    counts = torch.tensor([[5], [11]])
    depth = torch.tensor([0, 1, 1])
    verify = batched.forward(new, counts + depth, tree_mask=tree.expand(2, 3, 3))
    paths = [[0, 2], [0]]
    batched.keep(paths)
    step_ids = torch.randint(0, COMMON["vocab_size"], (2, 1), generator=gen)
    step = batched.forward(step_ids, counts + torch.tensor([[2], [1]]))
    for row, prompt in enumerate(prompts):
        single.reset()
        want = single.forward(prompt)
        close = {"rtol": 1e-5, "atol": 1e-5}
        torch.testing.assert_close(prefill.aux[row, 11 - prompt.numel():], want.aux, **close)
        torch.testing.assert_close(prefill.logits[row, 11 - prompt.numel():], want.logits, **close)
        want = single.forward(new[row], tree_mask=tree, positions=prompt.numel() + depth)
        torch.testing.assert_close(verify.logits[row], want.logits, **close)
        torch.testing.assert_close(verify.aux[row], want.aux, **close)
        single.keep(torch.tensor(paths[row]))
        want = single.forward(step_ids[row])
        torch.testing.assert_close(step.logits[row], want.logits, **close)
        torch.testing.assert_close(step.aux[row], want.aux, **close)
