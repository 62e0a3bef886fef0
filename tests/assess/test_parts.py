"""assess's small parts: how repetitive the continuations are, --model-free's names, and reading a partial
result back into the classes it was written from."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from draftlab.assess.partial import from_jsonable
from draftlab.assess.repetition import repetition
from draftlab.assess.run import parse_model_free
from draftlab.documents import to_jsonable


def test_repetition_counts_tokens_that_continue_an_earlier_window():
    # after the prompt 1 2 3 the text loops on 4 5 6; a token repeats when the 4-token window it ends already
    # occurred: the windows of the third turn (4 5 6 4, 5 6 4 5, 6 4 5 6) did, in the second: 3 of 9 tokens
    assert repetition([[1, 2, 3]], [[4, 5, 6, 4, 5, 6, 4, 5, 6]]) == pytest.approx(3 / 9)
    assert repetition([[1]], [[2, 3, 4, 5, 6, 7]]) == 0.0  # nothing repeats
    assert repetition([[7, 7, 7, 7]], [[7, 7]]) == 1.0  # the prompt's own window comes back
    assert repetition([[1]], [[]]) is None


@pytest.mark.parametrize("text, methods", [("ngram,suffix", ["ngram", "suffix"]), ("both", ["ngram", "suffix"]),
                                           ("suffix", ["suffix"]), ("none", []), ("", []), ("both,ngram", ["ngram", "suffix"])])
def test_model_free_names(text, methods):
    assert parse_model_free(text) == methods


@dataclass
class _Inner:
    lengths: list[int]
    share: float | None


@dataclass
class _Outer:
    by_batch: dict[int, _Inner]
    items: list[_Inner]
    name: str


def test_a_written_result_reads_back_equal():
    value = _Outer({1: _Inner([1, 2], 0.5), 8: _Inner([], None)}, [_Inner([3], 2.0)], "x")
    assert from_jsonable(_Outer, to_jsonable(value)) == value
