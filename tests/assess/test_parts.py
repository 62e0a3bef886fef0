"""assess's small parts: how repetitive the continuations are, --model-free's names, reading a partial
result back into the classes it was written from, and the verdict's rules on a made-up plan."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from costs import toy_profile

from draftlab.assess.partial import from_jsonable
from draftlab.assess.repetition import repetition
from draftlab.assess.run import parse_model_free
from draftlab.assess.verdict import Evidence, decide
from draftlab.cost.model import SpecConfig
from draftlab.cost.plan import make_plan
from draftlab.cost.probes import AcceptLength
from draftlab.cost.profile import load_profile
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


def test_a_head_that_pays_off_means_the_drafter_is_not_system_bound(tmp_path):
    """A drafter that accepts yet never pays off is system-bound, unless the target's own MTP head, accepting
    more at a cheaper pass, pays off on the same verify: then the drafter is not worth serving, the head is."""
    profile = load_profile(toy_profile(tmp_path / "costs.json", draft_ms=6.0, mtp_ms=0.6))
    chain = SpecConfig(3, 1, 4)
    drafter = [AcceptLength(chain, 1.6, "probe 3/1/4")]
    alone = decide(Evidence([], [], plan=make_plan(profile, drafter, batch_sizes=[1])))
    assert alone.kind == "system-bound" and alone.versus is None
    head = [AcceptLength(chain, 3.0, "probe mtp 3/1/4", method="mtp")]
    both = decide(Evidence([], [], plan=make_plan(profile, drafter, batch_sizes=[1], mtp=head)))
    assert both.kind == "speculation-off" and both.headline.startswith("Do not serve this drafter")
    assert both.versus is not None and both.versus.better == "mtp" and both.serve == {"1": "mtp 3/1/4"}
    assert (both.versus.drafter["accept_length"], both.versus.mtp["accept_length"]) == (1.6, 3.0)
    assert both.versus.drafter["speedup"] < 1 < both.versus.mtp["speedup"]


def test_the_drafter_and_the_head_are_compared_where_the_timings_hold(tmp_path):
    """Contradictions that name only batch 8 leave the batch-1 comparison decided (and say it is not made at
    8); ones naming batch 1, or not saying where, leave it to the accept lengths."""
    profile = load_profile(toy_profile(tmp_path / "costs.json", draft_ms=6.0, mtp_ms=0.6))
    chain = SpecConfig(3, 1, 4)
    plan = make_plan(profile, [AcceptLength(chain, 1.6, "probe 3/1/4")], batch_sizes=[1, 8],
                     mtp=[AcceptLength(chain, 3.0, "probe mtp 3/1/4", method="mtp")])
    noisy = ["3/1/4 at batch 8 is predicted 9.00x, above what its accept length 1.60 allows"]
    elsewhere = decide(Evidence([], [], plan=plan, timing=noisy, timing_batches=[8]))
    assert elsewhere.kind == "speed-undecided" and not elsewhere.serving.decided
    assert elsewhere.versus.better == "mtp" and elsewhere.versus.batch_size == 1
    assert elsewhere.versus.text.endswith("not compared at batch 8, where this machine's timings contradict each other")
    for named in ([1, 8], None):
        here = decide(Evidence([], [], plan=plan, timing=noisy, timing_batches=named)).versus
        assert here.better is None and "speedup" not in here.mtp
