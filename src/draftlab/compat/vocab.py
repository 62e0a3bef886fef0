"""Rules on the draft-vocabulary mapping (d2t offsets, t2d mask)."""

from __future__ import annotations

from collections.abc import Iterator

from draftlab.checkpoint.d2t import validate_d2t
from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair


def missing_d2t(pair: Pair) -> Iterator[Finding]:
    """Without d2t both engines read draft id i as target id i: acceptance collapses."""
    draft, full = pair.drafter.draft_vocab_size, pair.target.vocab_size
    if pair.d2t is None and draft < full:
        yield Finding("missing-d2t", "error", "d2t",
                      f"draft_vocab_size {draft} < vocab_size {full} but there is no d2t, so both engines map "
                      f"draft ids onto the first {draft} target ids and acceptance collapses",
                      "add the d2t/t2d buffers saved with this drafter's training run (or rebuild them from "
                      "its training data)")


def d2t_valid(pair: Pair) -> Iterator[Finding]:
    """d2t must map every draft id onto a distinct, in-range target id, in increasing order."""
    if pair.d2t is None:
        return
    if len(pair.d2t) != pair.drafter.draft_vocab_size:
        yield Finding("d2t-invalid", "error", "d2t",
                      f"d2t has {len(pair.d2t)} entries but draft_vocab_size is {pair.drafter.draft_vocab_size}",
                      "use the d2t saved with this drafter's lm_head")
        return
    for problem in validate_d2t(pair.d2t, None, pair.target.vocab_size):
        yield Finding("d2t-invalid", "error", "d2t", problem,
                      "use the d2t saved with this drafter's training run; it is not a valid offset table")


def t2d_matches(pair: Pair) -> Iterator[Finding]:
    """The engines ignore t2d, but training tools mask the loss with it."""
    if pair.d2t is None or pair.t2d is None:
        return
    d2t_problems = set(validate_d2t(pair.d2t, None, pair.target.vocab_size))
    for problem in validate_d2t(pair.d2t, pair.t2d, pair.target.vocab_size):
        if problem not in d2t_problems:
            yield Finding("t2d-mismatch", "warning", "t2d", problem,
                          "serving is unaffected (engines ignore t2d) but fine-tuning would mask the loss "
                          "wrongly; rebuild t2d from d2t before training")


def d2t_full_vocab(pair: Pair) -> Iterator[Finding]:
    """vLLM 0.30+ creates draft_id_to_target_id only for a pruned draft vocabulary, so a full-vocabulary
    drafter that ships d2t fails to load (llama_eagle3.py, qwen3_eagle3.py, deepseek_eagle3.py)."""
    d2t = pair.tensor("d2t")
    draft, full = pair.drafter.draft_vocab_size, pair.target.vocab_size
    if d2t is None or draft != full or not pair.release.d2t_needs_pruned_vocab:
        return
    yield Finding("d2t-full-vocab", "error", d2t.name,
                  f"draft_vocab_size {draft} equals the target's vocab_size, so {pair.release.name} creates no "
                  "draft_id_to_target_id and loading the shipped d2t fails (\"There is no module or parameter named "
                  "'draft_id_to_target_id'\"); vLLM up to 0.29 loaded it",
                  "drop d2t and t2d: over the full vocabulary the only valid d2t is the identity, which every "
                  "engine applies without one", fixable=True)


RULES = (missing_d2t, d2t_valid, t2d_matches, d2t_full_vocab)
