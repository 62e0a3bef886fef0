"""What draftlab writes loads in the peers' own code: SpecForge and speculators (installed --no-deps).

Every kind of drafter folder draftlab writes goes into SpecForge's ``LlamaForCausalLMEagle3`` (flat
folders: the only layout it reads) and speculators' ``Eagle3DraftModel`` (its layout directly; a
flat folder through speculators' converter): no missing or unexpected tensor, logits equal to
draftlab's drafter forward within 1e-5. speculators' converter run on a draftlab drafter loses the
aux ids; ``check`` says so and ``--fix --aux-layers`` restores them. ``vocab build`` equals
SpecForge's own mapping code.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from peer_kinds import (
    AUX,
    DRAFT_IDS,
    FLAT,
    KINDS,
    SPECULATORS,
    VOCAB,
    _quiet,
    draftlab_logits,
    inputs,
    make_target,
    peer_import_error,
    peer_load,
    skip_reason,
    speculators_convert,
    speculators_step,
    variant_tensors,
    write_flat_drafter,
)

from draftlab.compat import check_pair, fix_pair
from draftlab.compat.convert import convert_drafter
from draftlab.models.drafter import Eagle3Drafter
from draftlab.vocab import build_mapping_file
from draftlab.vocab.counts import TokenCounts

TOLERANCE = 1e-5
BUILT: dict[str, Path] = {}  # each kind is written once per run, then loaded by both peers


def need(peer: str) -> None:
    why = peer_import_error(peer)
    if why is not None:
        pytest.skip(skip_reason(peer, why))


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("peers")


@pytest.fixture(scope="module")
def target(root) -> Path:
    return make_target(root)


CASES = [(kind, peer) for kind in KINDS for peer in ("specforge", "speculators")
         if not (peer == "specforge" and kind.layout == SPECULATORS)]  # SpecForge reads flat configs only


@pytest.mark.parametrize("kind, peer", CASES, ids=[f"{peer}:{kind.name}" for kind, peer in CASES])
def test_every_output_kind_loads_in_the_peer_with_draftlabs_logits(root, target, kind, peer):
    need(peer)
    if kind.needs:
        need(kind.needs)
    if kind.name not in BUILT:
        BUILT[kind.name] = kind.build(root, target)
    folder = BUILT[kind.name]
    ids, hidden = inputs()
    loaded, _ = peer_load(peer, folder, kind.layout, root, target, ids, hidden)
    assert loaded.missing == [] and loaded.unexpected == []
    ours = draftlab_logits(folder, ids, hidden)
    assert loaded.logits.shape == ours.shape
    assert (loaded.logits - ours).abs().max().item() <= TOLERANCE
    assert torch.equal(loaded.logits.argmax(-1), ours.argmax(-1))


VARIANTS = [{"norm_before_fc": True}, {"fc_norm": True, "norm_output": True},
            {"norm_before_fc": True, "norm_output": True}]


@pytest.mark.parametrize("flags", VARIANTS, ids=["+".join(f) for f in VARIANTS])
def test_speculators_computes_each_variant_as_draftlab_does(tmp_path, flags):
    """speculators' own forward over a variant drafter (written by draftlab's convert): its logits and the
    hidden it feeds back equal draftlab's; with the variant's flags dropped from draftlab's reading they
    would not (so the comparison can fail)."""
    need("speculators")
    target = make_target(tmp_path)
    flat = write_flat_drafter(tmp_path / "flat", extra=variant_tensors(flags), **flags)
    folder = convert_drafter(flat, "speculators", tmp_path / "spec", target=target).out
    ids, hidden = inputs()
    peer_logits, peer_fed = speculators_step(folder, ids, hidden)
    drafter = Eagle3Drafter.load(folder, use_target_embedding=False)
    assert all(getattr(drafter.variant, flag) for flag in flags)  # convert carried every flag
    n = ids.numel()
    with torch.no_grad():
        logits, fed, _ = drafter.forward_masked(ids[None], hidden[None], torch.arange(n)[None],
                                                torch.ones(n, n, dtype=torch.bool).tril()[None])
    assert (peer_logits - logits[0]).abs().max().item() <= TOLERANCE
    assert (peer_fed - fed[0]).abs().max().item() <= TOLERANCE
    plain = dataclasses.replace(drafter.variant, norm_before_fc=False, fc_norm=False, norm_output=False)
    drafter.variant, drafter.input_norm, drafter.fc_norm = plain, None, None
    with torch.no_grad():
        logits, fed, _ = drafter.forward_masked(ids[None], hidden[None], torch.arange(n)[None],
                                                torch.ones(n, n, dtype=torch.bool).tril()[None])
    assert (peer_logits - logits[0]).abs().max().item() > 100 * TOLERANCE or \
        (peer_fed - fed[0]).abs().max().item() > 100 * TOLERANCE


def test_speculators_converter_loses_the_aux_ids_and_check_says_so(tmp_path):
    """The trap: the converter writes eagle_aux_hidden_state_layer_ids null and LlamaConfig's bos/eos."""
    need("speculators")
    target = make_target(tmp_path)
    converted = speculators_convert(write_flat_drafter(tmp_path / "ours"), target, tmp_path / "converted")
    assert json.loads((converted / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] is None
    result = check_pair(converted, target, "vllm")
    codes = {f.code: f for f in result.findings}
    assert result.aux_layers == [1, 3, 4] != AUX  # vLLM would capture the default, not the trained layers
    assert codes["aux-unset"].severity == "warning" and "speculators convert" in codes["aux-unset"].message
    assert "token-ids" in codes
    fixed = fix_pair(converted, target, tmp_path / "fixed", "vllm", aux_layers=AUX)
    assert fixed.after.aux_layers == AUX
    assert not {"aux-unset", "token-ids"} & {f.code for f in fixed.after.findings}


def test_flattened_speculators_config_builds_in_specforge_with_the_final_norm(tmp_path):
    """The bug this suite caught: the flattened config kept target_hidden_size null (TypeError in
    SpecForge) and speculators' norm_output false (SpecForge then skipped the final norm)."""
    need("specforge")
    need("speculators")
    target = make_target(tmp_path)
    converted = speculators_convert(write_flat_drafter(tmp_path / "ours"), target, tmp_path / "converted")
    out = fix_pair(converted, target, tmp_path / "fixed", "sglang").out
    config = json.loads((out / "config.json").read_text())
    assert config.get("target_hidden_size", config["hidden_size"]) == config["hidden_size"]
    assert config.get("norm_output", True) is True
    ids, hidden = inputs()
    loaded, _ = peer_load("specforge", out, FLAT, tmp_path, target, ids, hidden)
    assert (loaded.logits - draftlab_logits(out, ids, hidden)).abs().max().item() <= TOLERANCE


def test_vocab_build_equals_specforges_mapping_and_its_pt_loads(tmp_path):
    need("specforge")
    from specforge.data.preprocessing import process_token_dict_to_mappings
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from transformers import LlamaConfig

    # ties, and fewer seen tokens than the draft size: both padding and tie order must match
    counts = {7: 5, 3: 5, 90: 2, 11: 5, 50: 1, 2: 2}
    TokenCounts(VOCAB, counts, {}).save(tmp_path / "counts.json")
    build_mapping_file(tmp_path / "counts.json", 10, tmp_path / "map.pt")
    ours = torch.load(tmp_path / "map.pt", weights_only=True)
    d2t, t2d = process_token_dict_to_mappings(Counter(counts), 10, VOCAB)
    assert torch.equal(ours["d2t"], d2t) and torch.equal(ours["t2d"], t2d)
    model = LlamaForCausalLMEagle3(LlamaConfig(hidden_size=32, intermediate_size=48, num_attention_heads=4,
                                               num_key_value_heads=2, vocab_size=VOCAB, draft_vocab_size=10))
    model.load_vocab_mapping(str(tmp_path / "map.pt"))
    assert torch.equal(model.d2t, d2t) and torch.equal(model.t2d, t2d)


def test_converted_speculators_folder_loads_in_speculators_classes_with_every_weight(tmp_path):
    """speculators' own config class reads our config (verifier, proposal, aux ids, vocab, rope) and its
    model holds exactly the file's tensors."""
    need("speculators")
    from safetensors.torch import load_file
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    from draftlab.compat.convert import convert_drafter

    target = make_target(tmp_path)
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 256}
    src = write_flat_drafter(tmp_path / "ours", rope_scaling=rope, max_position_embeddings=512)
    out = convert_drafter(src, "speculators", tmp_path / "spec", target=target).out
    with _quiet():
        config = Eagle3SpeculatorConfig.from_pretrained(str(out))
        model = Eagle3DraftModel.from_pretrained(str(out)).eval()
    assert config.speculators_config.verifier.name_or_path == str(target)
    assert config.speculators_config.verifier.architectures == ["LlamaForCausalLM"]
    assert config.speculators_config.default_proposal_method == "greedy"
    assert config.eagle_aux_hidden_state_layer_ids == [k + 1 for k in AUX]
    assert config.draft_vocab_size == len(DRAFT_IDS) and config.norm_before_residual is False
    layer = config.transformer_layer_config
    assert layer.max_position_embeddings == 512 and layer.vocab_size == VOCAB
    assert {k: v for k, v in layer.rope_parameters.items() if k != "rope_theta"} == rope
    stored = load_file(str(out / "model.safetensors"))
    state = model.state_dict()
    assert set(stored) <= set(state)
    for name, tensor in stored.items():
        assert torch.equal(state[name], tensor), name
