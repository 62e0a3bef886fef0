"""Stored tensors as numpy arrays (checkpoint.arrays): the same bits and the same rounding as torch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from draftlab.checkpoint import open_checkpoint
from draftlab.checkpoint.arrays import from_float32, read_arrays, save_arrays, tensor_array, to_float32
from draftlab.checkpoint.safetensors_header import read_header


def float32_cases() -> np.ndarray:
    """Random bit patterns (every class: normal, subnormal, inf, NaN) plus exact bf16 ties and edges."""
    rng = np.random.default_rng(0)
    random_bits = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    upper = rng.integers(0, 2**16, 2_000, dtype=np.uint64).astype(np.uint32) << 16
    ties = np.concatenate([upper | 0x8000, upper | 0x7FFF, upper | 0x8001])  # halfway, just below, just above
    edges = np.array([0x00000000, 0x80000000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0x00000001, 0x007FFFFF,
                      0x3F808000, 0x3F818000], dtype=np.uint32)  # 0x3F80_8000 ties to even down, 0x3F81_8000 up
    return np.concatenate([random_bits, ties, edges]).view(np.float32)


@pytest.mark.parametrize("dtype, name", [(torch.bfloat16, "BF16"), (torch.float16, "F16")])
def test_from_float32_rounds_as_torch(dtype: torch.dtype, name: str) -> None:
    values = float32_cases()
    ours = from_float32(values, name).view(np.int16)
    theirs = torch.from_numpy(values).to(dtype).view(torch.int16).numpy()
    nan = np.isnan(values)
    assert np.array_equal(ours[~nan], theirs[~nan])
    assert np.isnan(to_float32(ours.view(np.uint16 if name == "BF16" else np.float16), name)[nan]).all()


@pytest.mark.parametrize("dtype, name", [(torch.bfloat16, "BF16"), (torch.float16, "F16")])
def test_to_float32_is_exact_for_every_half_precision_value(dtype: torch.dtype, name: str) -> None:
    every = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    stored = every if name == "BF16" else every.view(np.float16)
    ours = to_float32(stored, name)
    theirs = torch.from_numpy(every.view(np.int16)).view(dtype).float().numpy()
    nan = np.isnan(theirs)
    assert np.array_equal(ours[~nan].view(np.uint32), theirs[~nan].view(np.uint32)) and np.isnan(ours[nan]).all()


def tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"w.bf16": torch.randn(5, 3, generator=g).to(torch.bfloat16), "w.f16": torch.randn(7, generator=g).half(),
            "w.f32": torch.randn(2, 2, 2, generator=g), "d2t": torch.tensor([3, 1, 4, 1, 5]),
            "t2d": torch.tensor([True, False, True]), "empty": torch.zeros(0, 4, dtype=torch.bfloat16)}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.view(torch.uint8).equal(b.view(torch.uint8))


def test_safetensors_and_bin_read_the_same_bits_and_write_a_file_safetensors_reads(tmp_path: Path) -> None:
    original = tensors()
    for name in ("st", "bin"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    save_file(original, str(tmp_path / "st" / "model.safetensors"))
    torch.save(original, tmp_path / "bin" / "pytorch_model.bin")
    from_st = read_arrays(open_checkpoint(tmp_path / "st"))
    from_bin = read_arrays(open_checkpoint(tmp_path / "bin"))
    ckpt = open_checkpoint(tmp_path / "st")
    for key, tensor in original.items():
        assert from_st[key].tobytes() == from_bin[key].tobytes() == tensor_array(tensor).tobytes(), key
        assert from_st[key].shape == tuple(tensor.shape)
    out = tmp_path / "out.safetensors"
    save_arrays(out, {k: (ckpt.tensors[k].dtype, a) for k, a in from_st.items()}, {"format": "pt"})
    back = load_file(str(out))
    assert set(back) == set(original) and all(same_bits(back[k], original[k]) for k in original)
    written = read_header(out)[0]  # every tensor starts aligned to its element size
    assert all(t.data_start % 8 == 0 if t.numel == 0 else t.data_start % (t.nbytes // t.numel) == 0
               for t in written.values())


def test_save_refuses_an_array_held_in_the_wrong_type(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be held as uint16"):
        save_arrays(tmp_path / "x.safetensors", {"w": ("BF16", np.zeros(3, dtype=np.float32))}, {})
