"""The drafter a run starts from: built for the target from scratch, or an old drafter (warm start).

From scratch the config is derived from the target (sizes, heads, RoPE, context, token ids; SpecForge's
one-layer ``LlamaForCausalLMEagle3``, or for an MLA target (DeepSeek-V3, Kimi) the engines' MLA drafter
``Eagle3DeepseekV2ForCausalLM`` with the target's MLA dimensions and YaRN), the draft vocabulary is built from the data's counts by
``vocab build``'s rule, and the embedding is the target's, frozen (serving replaces it with the
target's anyway). A warm start takes every tensor of the old drafter, its config and its aux layers;
its d2t/t2d are kept bit for bit, unless ``remap`` counts are given: then the vocabulary is rebuilt
from them and the old lm_head rows move with their tokens (``vocab remap``). Either way the config
names the aux layers in both engines' fields.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from draftlab.checkpoint import DrafterConfig, TargetConfig, is_drafter, open_checkpoint, text_config
from draftlab.checkpoint.synth import mla_drafter_config, specforge_drafter_config
from draftlab.checkpoint.variants import NEW_DRAFTER_FLAGS
from draftlab.engines import default_aux_layers, first_nameable, intended_aux_layers, written_aux_ids
from draftlab.errors import DraftlabError
from draftlab.models.drafter import Eagle3Drafter
from draftlab.train.checkpoints import sliding_window_fields
from draftlab.vocab.build import build_mapping
from draftlab.vocab.counts import TokenCounts, read_counts
from draftlab.vocab.mapping import VocabMapping
from draftlab.vocab.remap import remap_drafter


@dataclass
class StartingDrafter:
    drafter: Eagle3Drafter  # float32 master weights, embedding shared with the target and frozen
    t2d: torch.Tensor  # bool [V]
    config: dict[str, Any]  # the config.json OUT gets
    aux_layers: list[int]  # canonical ids the target must capture
    vocab: str  # "built", "kept" or "remapped"


def with_aux_ids(config: dict[str, Any], aux: list[int], target: TargetConfig) -> dict[str, Any]:
    """``config`` with ``aux`` written into SGLang's and vLLM's fields, each in its newest release's convention
    for ``target``'s family."""
    out = copy.deepcopy(config)
    eagle = dict(out.get("eagle_config") or {})
    eagle["eagle_aux_hidden_state_layer_ids"] = written_aux_ids("sglang", aux, target=target)
    eagle.setdefault("use_aux_hidden_state", True)
    out["eagle_config"] = eagle
    out["eagle_aux_hidden_state_layer_ids"] = written_aux_ids("vllm", aux, target=target)
    return out


DRAFT_VOCAB = 32000  # the draft vocabulary from scratch when none is asked for (and the target has more)


def scratch_aux_layers(num_layers: int, given: list[int] | None = None, *, first: int = 0) -> list[int]:
    """The three distinct target layers a drafter from scratch fuses: ``given`` (checked), else the
    engines' default, else, on a target too shallow for that default (fewer than 8 layers, where it
    names a layer twice or one that cannot be captured), three spread evenly over first..L-2 (``first``:
    :func:`~draftlab.engines.first_nameable` for the target)."""
    last = num_layers - 2  # the output of the final layer is not captured
    if given is not None:
        bad = [k for k in given if not 0 <= k <= last]
        if bad:
            raise DraftlabError(f"--aux-layers: layer {bad[0]} cannot be captured from a {num_layers}-layer "
                                f"target (0..{last})")
        if len(set(given)) != len(given):
            raise DraftlabError(f"--aux-layers {','.join(map(str, given))} names a layer twice; give distinct "
                                "layers")
        return list(given)
    default = default_aux_layers(num_layers)
    if len(set(default)) == 3 and all(first <= k <= last for k in default):
        return default
    if last - first < 2:
        raise DraftlabError(f"a {num_layers}-layer target has {max(last - first + 1, 0)} capturable layer(s); an "
                            f"EAGLE-3 drafter fuses 3 distinct ones: train for a target with at least {first + 4} "
                            "layers")
    return [first, (first + last + 1) // 2, last]


def scratch_vocab_size(vocab_size: int, asked: int | None) -> int:
    """The draft vocabulary size from scratch: ``asked`` when the target's vocabulary holds it, else
    :data:`DRAFT_VOCAB` or the whole target vocabulary when that is smaller."""
    if asked is None:
        return min(DRAFT_VOCAB, vocab_size)
    if asked > vocab_size:
        raise DraftlabError(f"--draft-vocab-size {asked} is larger than the target's {vocab_size}-token "
                            f"vocabulary; pass --draft-vocab-size {min(DRAFT_VOCAB, vocab_size)} or less")
    return asked


def scratch_config(target_dir: str | Path, draft_vocab_size: int | None, aux_layers: list[int] | None,
                   variant: str = "eagle3", sliding_window: int | None = None) -> dict[str, Any]:
    """A SpecForge drafter config sized like the target (its MLP width, head size and RoPE), with the
    flags of ``variant`` (:data:`~draftlab.checkpoint.variants.NEW_DRAFTER_FLAGS`) and, given one, every
    layer on a ``sliding_window``."""
    raw = open_checkpoint(target_dir).config
    target = TargetConfig.from_dict(raw)
    draft_vocab_size = scratch_vocab_size(target.vocab_size, draft_vocab_size)
    aux = scratch_aux_layers(target.num_layers, aux_layers, first=first_nameable(target))
    inter = text_config(raw).get("intermediate_size")
    eps = float(text_config(raw).get("rms_norm_eps", 1e-6))
    if target.attention == "MLA":  # the engines' MLA drafter (Eagle3DeepseekV2ForCausalLM), the target's MLA dims
        config = mla_drafter_config(raw, draft_vocab_size=draft_vocab_size, target_hidden_size=target.hidden_size,
                                    rms_norm_eps=eps, **NEW_DRAFTER_FLAGS[variant])
    else:
        config = specforge_drafter_config(target, draft_vocab_size=draft_vocab_size,
                                          intermediate_size=inter if isinstance(inter, int) else None,
                                          head_dim=target.head_dim, target_hidden_size=target.hidden_size,
                                          rms_norm_eps=eps, **NEW_DRAFTER_FLAGS[variant])
    if sliding_window is not None:
        if target.attention == "MLA":
            raise DraftlabError("--sliding-window: this target gets an MLA drafter, which draftlab trains with full "
                                "attention only (the engines serve MLA drafters without a window); leave it out")
        config.update(sliding_window_fields(sliding_window, int(config.get("num_hidden_layers", 1))))
    return with_aux_ids(config, aux, target)


def from_scratch(target_dir: str | Path, embed: nn.Embedding, counts: TokenCounts, draft_vocab_size: int | None,
                 aux_layers: list[int] | None, seed: int, variant: str = "eagle3",
                 sliding_window: int | None = None) -> StartingDrafter:
    config = scratch_config(target_dir, draft_vocab_size, aux_layers, variant, sliding_window)
    mapping = build_mapping(counts, config["draft_vocab_size"], config["vocab_size"])
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        drafter = Eagle3Drafter(DrafterConfig.from_dict(config), embed_tokens=embed)
    drafter.d2t.copy_(torch.from_numpy(mapping.d2t))
    aux = aux_layers if aux_layers is not None else config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    return StartingDrafter(master_weights(drafter), torch.from_numpy(mapping.t2d.copy()), config, list(aux), "built")


def warm_start(init: str | Path, target_dir: str | Path, embed_owner: Any, *, remap: str | Path | None,
               staging: Path, aux_layers: list[int] | None = None) -> StartingDrafter:
    """The old drafter ``init`` (only read; a speculators-layout one through ``convert`` into a copy
    under ``staging``); with ``remap`` its vocabulary rebuilt from those counts in a copy under
    ``staging`` (through ``vocab remap``, new rows from the target's lm_head). It fuses ``aux_layers`` (the
    ones an engine release captures for it), else the ones its config intends; the copy names them in both
    engines' fields."""
    init = Path(init)
    ckpt = open_checkpoint(init)
    if not is_drafter(ckpt):
        raise DraftlabError("is not an EAGLE-3 drafter", path=init)
    cfg = DrafterConfig.from_dict(ckpt.config)
    target = TargetConfig.from_dict(open_checkpoint(target_dir).config)
    aux = aux_layers if aux_layers is not None else intended_aux_layers(cfg, target.num_layers, target=target).layers
    if cfg.layout != "specforge" and cfg.layer_kind == "llama":  # speculators' layout (vLLM's): the same tensors,
        # renamed, in a copy; a Qwen3 layer is told only in speculators' layout, so such a drafter stays in it
        from draftlab.compat.convert import convert_drafter

        init = convert_drafter(init, "specforge", staging / "specforge", target=target_dir).out
    source, vocab = init, "kept"
    if remap is not None:
        old = VocabMapping.from_drafter(init)
        mapping = build_mapping(read_counts(remap), old.draft_size, old.vocab_size, source=remap)
        source, vocab = staging / "remapped", "remapped"
        remap_drafter(init, mapping, source, target=target_dir)
    mapping = VocabMapping.from_drafter(source)
    drafter = Eagle3Drafter.load(source, target=embed_owner, dtype="float32",
                                 device=str(embed_owner.embed_tokens.weight.device))
    config = with_aux_ids(open_checkpoint(source).config, aux, target)
    return StartingDrafter(master_weights(drafter), torch.from_numpy(mapping.t2d.copy()), config, aux, vocab)


def setup_notes(target: TargetConfig, start: StartingDrafter, *, scratch: bool, opts_aux: list[int] | None,
                opts_vocab: int | None) -> list[str]:
    """What a run from scratch chose for the user where the usual default does not fit the target."""
    if not scratch:
        return []
    notes = []
    default = default_aux_layers(target.num_layers)
    if opts_aux is None and start.aux_layers != default:
        notes.append(f"aux layers {', '.join(map(str, start.aux_layers))}: the engines' default "
                     f"{', '.join(map(str, default))} does not name 3 distinct capturable layers of a "
                     f"{target.num_layers}-layer target (pass --aux-layers to choose others)")
    size = start.config.get("draft_vocab_size")
    if opts_vocab is None and size != DRAFT_VOCAB:
        notes.append(f"draft vocabulary {size} tokens: the target's whole vocabulary, smaller than the default "
                     f"{DRAFT_VOCAB} (pass --draft-vocab-size to prune it)")
    return notes


def master_weights(drafter: Eagle3Drafter) -> Eagle3Drafter:
    """float32 trainable weights; the embedding (the target's, or the drafter's own) frozen."""
    drafter.embed_tokens.weight.requires_grad_(False)
    for name, p in drafter.named_parameters():
        if not name.startswith("embed_tokens."):
            p.data = p.data.float()
            p.requires_grad_(True)
    return drafter.train()
