"""Rules on tensor shapes: fc, the first layer's q/k/v, vocab sizes, lm_head."""

from __future__ import annotations

from collections.abc import Iterator

from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair


def fc_width(pair: Pair) -> Iterator[Finding]:
    """fc maps the concatenated aux features (n x target hidden) onto the drafter's hidden size."""
    fc = pair.tensor("fc.weight")
    if fc is None:
        yield Finding("missing-tensor", "error", "fc.weight",
                      "the drafter has no fc.weight, so the target's aux features cannot enter it",
                      "use a complete EAGLE-3 checkpoint (fc, midlayer/layers.0, norm, lm_head)")
        return
    n_aux = len(pair.captured.layers)
    want = (pair.drafter.hidden_size, n_aux * pair.target.hidden_size)
    if len(fc.shape) != 2 or tuple(fc.shape) != want:
        yield Finding("fc-width", "error", fc.name,
                      f"{fc.name} is {list(fc.shape)} but {n_aux} aux layers of the target's hidden size "
                      f"{pair.target.hidden_size} need {list(want)}",
                      "this drafter was trained for a target of another hidden size; use one trained for this target")


def target_hidden_size(pair: Pair) -> Iterator[Finding]:
    """target_hidden_size (defaulting to hidden_size) sizes fc in both engines."""
    configured, actual = pair.drafter.target_hidden_size, pair.target.hidden_size
    if configured == actual:
        return
    fc = pair.tensor("fc.weight")
    weights_fit = fc is not None and len(fc.shape) == 2 and fc.shape[1] == len(pair.captured.layers) * actual
    yield Finding("target-hidden-size", "error", "target_hidden_size",
                  f"the config gives target hidden size {configured} but the target's is {actual}",
                  f"set target_hidden_size to {actual}" if weights_fit
                  else "the fc weights do not fit this target either; use a drafter trained for it",
                  fixable=weights_fit)


def qkv_width(pair: Pair) -> Iterator[Finding]:
    """The first layer's q/k/v read concat(embedding, hidden): 2 x hidden inputs (for MLA, the down-projections
    ``q_a_proj`` or ``q_proj``, and ``kv_a_proj_with_mqa``)."""
    want = 2 * pair.drafter.hidden_size
    mla = pair.drafter.variant.mla
    projections = ("q_proj", "k_proj", "v_proj") if mla is None else (
        "q_a_proj" if mla.q_lora_rank else "q_proj", "kv_a_proj_with_mqa")
    for proj in projections:
        info = pair.layer_tensor(f"self_attn.{proj}.weight")
        if info is None:
            yield Finding("missing-tensor", "error", f"midlayer.self_attn.{proj}.weight",
                          f"the drafter's decoder layer has no {proj} weight",
                          "use a complete EAGLE-3 checkpoint")
        elif len(info.shape) != 2 or info.shape[1] != want:
            yield Finding("qkv-width", "error", info.name,
                          f"{info.name} takes {info.shape[-1]} inputs but EAGLE-3 feeds concat(embedding, hidden) "
                          f"= 2 x {pair.drafter.hidden_size} = {want}",
                          "this is not an EAGLE-3 first layer (EAGLE-1/2 layers take hidden only)")


def vocab_size(pair: Pair) -> Iterator[Finding]:
    """d2t and the embedding index the target's vocabulary."""
    if pair.drafter.vocab_size != pair.target.vocab_size:
        yield Finding("vocab-size", "error", pair.layer_field("vocab_size"),
                      f"the drafter's vocab_size is {pair.drafter.vocab_size} but the target's is "
                      f"{pair.target.vocab_size}; draft ids would map to the wrong target tokens",
                      "use a drafter built for this target's tokenizer, or remap its vocabulary")


def lm_head_rows(pair: Pair) -> Iterator[Finding]:
    """The drafter's own head scores draft_vocab_size tokens."""
    head = pair.tensor("lm_head.weight")
    rows = pair.drafter.draft_vocab_size
    if head is None:
        if pair.drafter.draft_vocab_size_set and not pair.drafter.tie_word_embeddings:
            yield Finding("missing-tensor", "error", "lm_head.weight",
                          f"draft_vocab_size is {rows} but the drafter has no lm_head.weight, so its head "
                          "would stay uninitialised",
                          "use a checkpoint that includes the trained lm_head")
        return
    if head.shape[0] != rows:
        yield Finding("lm-head-rows", "error", "lm_head.weight",
                      f"lm_head.weight has {head.shape[0]} rows but draft_vocab_size is {rows}",
                      f"set draft_vocab_size to {head.shape[0]} if d2t has that many entries; otherwise "
                      "the checkpoint is inconsistent")


RULES = (fc_width, target_hidden_size, qkv_width, vocab_size, lm_head_rows)
