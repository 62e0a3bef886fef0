"""Rules on tensor shapes: fc, the first layer's q/k/v, vocab sizes, lm_head."""

from __future__ import annotations

import re
from collections.abc import Iterator

from draftlab.checkpoint.synth import drafter_specs
from draftlab.compat.findings import Finding
from draftlab.compat.pair import Pair
from draftlab.engines.loading import engine_loading


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


# Covered by the rules above (fc, the q/k/v input width, lm_head rows) or by the variant rules (input_norm, fc_norm).
_OWN_RULES = ("fc.weight", "input_norm.", "fc_norm.")


def _layer_prefix(pair: Pair) -> str:
    """The first decoder layer's spelling in this folder (``midlayer.`` or ``layers.0.``)."""
    names = (n.removeprefix("model.") for n in pair.drafter_ckpt.tensors)
    return "midlayer." if any(n.startswith("midlayer.") for n in names) else "layers.0."


def _expected(pair: Pair) -> dict[str, tuple[int, ...]]:
    """The shape the engines build for each tensor of the first decoder layer, the final norm, lm_head's width and
    (when stored) embed_tokens and a Qwen3 layer's per-head q/k norms, from the config."""
    d, prefix = pair.drafter, _layer_prefix(pair)
    specs = {name: shape for name, (_, shape) in drafter_specs(d, layer_prefix=prefix, embed=True).items()
             if not name.startswith(_OWN_RULES)}
    if d.variant.mla is None:
        specs.update({f"{prefix}self_attn.{n}.weight": (d.head_dim,) for n in ("q_norm", "k_norm")})
    if not d.intermediate_size:  # not in the config: the engines' default applies, not checked here
        specs = {n: s for n, s in specs.items() if ".mlp." not in n}
    return specs


def _judged_elsewhere(pair: Pair, name: str, shape: tuple[int, ...]) -> bool:
    """A mismatch another rule reports: a q/k/v input width (qkv-width), lm_head's rows (lm-head-rows)."""
    inputs = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "q_a_proj.weight", "kv_a_proj_with_mqa.weight")
    if name.endswith(inputs):
        return shape[-1] != 2 * pair.drafter.hidden_size
    return name == "lm_head.weight" and shape[0] != pair.drafter.draft_vocab_size


def tensor_shapes(pair: Pair) -> Iterator[Finding]:
    """Every other tensor the engines bind has the shape the config builds (the load fails otherwise, or, SGLang,
    an absent one stays uninitialised): the first layer's attention outputs, MLP and norms, norm, lm_head's width,
    embed_tokens, q_norm/k_norm."""
    optional = ("embed_tokens.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight", "lm_head.weight")
    wrong, missing = [], []
    for name, shape in _expected(pair).items():
        info = pair.tensor(name)
        if info is None and not name.endswith(optional):  # lm_head: missing-tensor's own rule
            missing.append(name)
        elif info is not None and tuple(info.shape) != shape and not _judged_elsewhere(pair, name, info.shape):
            wrong.append((info.name, list(info.shape), list(shape)))
    if wrong:
        name, got, want = wrong[0]
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        yield Finding("tensor-shape", "error", name,
                      f"{name} is {got} but the config builds it {want}{more}: the engines' weight loaders refuse it "
                      "and so does draftlab", "use the config the weights were trained with (sizes, heads, head_dim)")
    if missing and not any(f.code == "missing-tensor" for f in qkv_width(pair)):
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        yield Finding("missing-tensor", "error", missing[0],
                      f"the drafter has no {missing[0]}{more}: the engines would run that part with uninitialised "
                      "weights (SGLang) or fail the load (vLLM)", "use a complete EAGLE-3 checkpoint")


_LAYER_INDEX = re.compile(r"^(?:layers|additional_layers)\.(\d+)\.")


def layer_count(pair: Pair) -> Iterator[Finding]:
    """The weights hold as many decoder layers as the config builds (``layers.{i}`` or SGLang's
    ``additional_layers.{i - 1}`` after the first); the engines leave a missing one uninitialised."""
    indices = {0}
    for name in pair.drafter_ckpt.tensors:
        found = _LAYER_INDEX.match(name.removeprefix("model."))
        if found:
            indices.add(int(found.group(1)) + name.removeprefix("model.").startswith("additional_layers."))
    stored, wanted = max(indices) + 1, pair.drafter.num_layers
    limit = engine_loading(pair.engine).max_layers
    if stored < wanted and (limit is None or wanted <= limit):  # past the engine's limit: num-layers says so
        yield Finding("missing-tensor", "error", pair.layer_field("num_hidden_layers"),
                      f"num_hidden_layers is {wanted} but the weights hold {stored} decoder layer(s): the engines would "
                      "run the others with uninitialised weights, and draftlab refuses it",
                      f"set num_hidden_layers to {stored} if that is what the drafter was trained with")


RULES = (fc_width, target_hidden_size, qkv_width, vocab_size, lm_head_rows, tensor_shapes, layer_count)
