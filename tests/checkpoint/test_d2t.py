from __future__ import annotations

import torch

from draftlab.checkpoint.d2t import validate_d2t
from draftlab.checkpoint.synth import vocab_mapping


def test_valid_mapping_from_torch_tensors():
    d2t, t2d = vocab_mapping([3, 5, 9, 10], 12)
    assert d2t == [3, 4, 7, 7]
    assert validate_d2t(torch.tensor(d2t), torch.tensor(t2d, dtype=torch.bool), 12) == []


def test_each_problem_is_named():
    assert "outside the target vocabulary" in validate_d2t([0, 0, 20], None, 12)[0]
    assert "already taken" in validate_d2t([0, 0, -1], None, 12)[0]
    assert "not increasing" in validate_d2t([5, 0, 0], None, 12)[0]
    assert "dtype" in validate_d2t(torch.zeros(3), None, 12)[0]
    assert "one-dimensional" in validate_d2t(torch.zeros(2, 2, dtype=torch.int64), None, 12)[0]


def test_t2d_checked_against_d2t():
    d2t, t2d = vocab_mapping([1, 2], 4)
    assert validate_d2t(d2t, t2d, 4) == []
    problems = validate_d2t(d2t, [1, 0, 1, 0], 4)
    assert any("false at 1 target ids" in p for p in problems) and any("true at 1" in p for p in problems)
    assert "entries" in validate_d2t(d2t, [0, 1, 1], 4)[0]
