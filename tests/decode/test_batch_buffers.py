"""The batched decoder over preallocated caches: buffers allocated once per generate and never moved,
and a sliding-window family decodes exactly as it does one prompt at a time."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from draftlab.decode.batch_decoder import BatchSpeculativeDecoder
from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.models.pair import load_pair
from draftlab.models.static_kv import BatchKV

PROMPTS = [b"def __init__(self", b"import os\nimport sys\n", b"x"]


def test_buffers_are_allocated_once_per_generate(toy_pair, monkeypatch):
    """Every write of a whole generate lands in the two caches' first buffers (target, drafter), and
    attention reads views of them."""
    pair = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="dynamic")
    made: list[BatchKV] = []
    seen: dict[int, set[tuple[int, int]]] = {}
    init, update = BatchKV.__init__, BatchKV.update

    def record_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    def record_update(self, key, value, layer_idx, *args, **kwargs):
        keys, values = update(self, key, value, layer_idx, *args, **kwargs)
        assert keys.untyped_storage().data_ptr() == self.keys.untyped_storage().data_ptr()
        assert values.untyped_storage().data_ptr() == self.values.untyped_storage().data_ptr()
        seen.setdefault(id(self), set()).add((self.keys.data_ptr(), self.values.data_ptr()))
        return keys, values

    monkeypatch.setattr(BatchKV, "__init__", record_init)
    monkeypatch.setattr(BatchKV, "update", record_update)
    rows = BatchSpeculativeDecoder(pair.target, pair.drafter, exact_spec_flags(3, 2, 4)).generate(
        [list(p) for p in PROMPTS], max_new_tokens=24)
    assert all(len(r.output_ids) == 24 for r in rows) and len({len(r.accept_lengths) for r in rows}) > 1
    assert len(made) == 2 and set(seen) == {id(kv) for kv in made}
    assert all(len(pointers) == 1 for pointers in seen.values())


@pytest.fixture(scope="module")
def windowed(toy_pair, tmp_path_factory):
    """The toy pair with its Llama target read as a Mistral (the same weights and layers) whose
    8-token sliding window is shorter than the prompts: the drafter still accepts."""
    folder = tmp_path_factory.mktemp("mistral") / "target"
    shutil.copytree(toy_pair.target_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=8)
    (folder / "config.json").write_text(json.dumps(config))
    return load_pair(folder, toy_pair.drafter_dir, cache="dynamic")


def test_the_window_is_in_effect(windowed, toy_pair):
    """Past 8 tokens the windowed target computes something else than the plain one: the equality
    below then covers the window's masks (the greedy texts can still agree)."""
    plain = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="dynamic").target
    prompt = torch.tensor(list(PROMPTS[1]))  # 21 tokens
    outputs = []
    for target in (windowed.target, plain):
        target.reset()
        outputs.append(target.forward(prompt))
    assert torch.equal(outputs[0].logits[:8], outputs[1].logits[:8])
    assert (outputs[0].logits[8:] - outputs[1].logits[8:]).abs().max() > 0.1
    assert (outputs[0].aux[8:] - outputs[1].aux[8:]).abs().max() > 0.1


@pytest.mark.parametrize("config", [(3, 2, 4), (4, 1, 5), None], ids=str)
def test_sliding_window_batch_equals_one_at_a_time(windowed, config):
    flags = exact_spec_flags(*config) if config else None
    drafter = windowed.drafter if flags else None
    assert windowed.target.config.model_type == "mistral"
    prompts = [list(p) for p in PROMPTS]
    single = SpeculativeDecoder(windowed.target, drafter, flags)
    expected = []
    for prompt in prompts:
        commits = list(single.stream(prompt, max_new_tokens=30, ignore_eos=True))
        expected.append(([t for c in commits for t in c.tokens],
                         [c.accept_length for c in commits if c.accept_length is not None]))
    rows = BatchSpeculativeDecoder(windowed.target, drafter, flags).generate(prompts, max_new_tokens=30,
                                                                             ignore_eos=True)
    assert [(r.output_ids, r.accept_lengths) for r in rows] == expected
    if flags:  # rows accepted different lengths, so the caches were padded and packed
        lengths = [n for _, ls in expected for n in ls]
        assert sum(lengths) / len(lengths) > 2 and len(set(lengths)) > 1
