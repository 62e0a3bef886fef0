"""A target split by a device map (``--device-map auto``), checked on the CPU with the trained toy pair.

On a machine without GPUs ``device_map="auto"`` puts everything on the CPU, so the first tests check
the plumbing (options, placement, refusals) and that nothing changes. The hooked test dispatches the
target through accelerate with its hooks forced on, two groups of layers as a two-GPU split would
have them, so every pass goes through the hooks that move arguments, keep the KV cache in place and
bring outputs back: it checks that aux capture, keep/crop of the cache, the probe's batched pass
and the continuations survive the hooks. It cannot check real transfers between two devices.
"""

import json

import pytest
import torch
from accelerate import dispatch_model

from draftlab.cli import main
from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.decode.generate import generate
from draftlab.engines.sglang_flags import resolve_spec_flags
from draftlab.errors import DraftlabError
from draftlab.models.devices import offloaded
from draftlab.models.pair import load_pair
from draftlab.models.target import TargetRunner
from draftlab.probe.continuations import target_continuations
from draftlab.probe.probe import probe, probe_sequences

TEXTS = ["def __init__(self, ", "import os\nimport sys\n\n", "    for i in range(len("]
NEW = 24


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("p") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in TEXTS))
    return path


@pytest.mark.parametrize("cfg", [(3, 1, 4), (4, 4, 8)])
def test_generate_with_device_map_matches_one_device(toy_pair, prompts, cfg):
    s, k, n = cfg
    args = (toy_pair.target_dir, toy_pair.drafter_dir, prompts)
    one = generate(*args, steps=s, topk=k, num_draft_tokens=n, max_new_tokens=NEW, device="cpu")
    split = generate(*args, steps=s, topk=k, num_draft_tokens=n, max_new_tokens=NEW, device_map="auto")
    assert [r.output_ids for r in split.results] == [r.output_ids for r in one.results]
    assert [r.accept_lengths for r in split.results] == [r.accept_lengths for r in one.results]
    assert one.mean_accept_length > 1.5  # real acceptance, so a broken drafter path would show
    assert split.config["device_map"] == "auto" and split.config["device"] is None
    assert split.config["target_devices"] == ["cpu"] and split.config["cache"] == "dynamic"


def test_probe_with_device_map_matches_one_device(toy_pair, prompts):
    args = (toy_pair.target_dir, toy_pair.drafter_dir, prompts)
    one = probe(*args, steps=3, topk=1, num_draft_tokens=4, max_new_tokens=NEW, batch_size=2, device="cpu")
    split = probe(*args, steps=3, topk=1, num_draft_tokens=4, max_new_tokens=NEW, batch_size=2, device_map="auto")
    assert [r.accept_lengths for r in split.results] == [r.accept_lengths for r in one.results]
    assert one.mean_accept_length > 1.5 and split.config["device_map"] == "auto"
    sampled = [probe(*args, steps=3, topk=1, num_draft_tokens=4, max_new_tokens=NEW, temperature=0.7, seed=3,
                     **where) for where in ({"device": "cpu"}, {"device_map": "auto"})]
    assert sampled[1].mean_accept_length == pytest.approx(sampled[0].mean_accept_length)
    assert sampled[0].estimate and 1.0 < sampled[0].mean_accept_length < 4.0


@pytest.mark.parametrize("command", ["generate", "probe"])
def test_cli_refuses_device_and_device_map_together(toy_pair, prompts, command, capsys):
    code = main([command, "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                 "--prompts", str(prompts), "--steps", "3", "--topk", "1", "--num-draft-tokens", "4",
                 "--device", "cpu", "--device-map", "auto", "--json"])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert len(out.err.strip().splitlines()) == 1 and "--device-map" in out.err and "--device" in out.err


def test_unknown_device_map_and_features_with_device_map_are_refused(toy_pair, prompts, tmp_path):
    with pytest.raises(DraftlabError, match="unknown device map 'gpu'"):
        generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=3, topk=1, num_draft_tokens=4,
                 device_map="gpu")
    with pytest.raises(DraftlabError, match="--features"):
        probe(toy_pair.target_dir, toy_pair.drafter_dir, features=tmp_path, steps=3, topk=1, num_draft_tokens=4,
              device_map="auto")


def test_a_map_that_spills_off_the_gpus_is_recognised():
    assert offloaded({"model.embed_tokens": 0, "model.layers.0": 1, "lm_head": 1}) is None
    assert offloaded({"": "cpu"}) is None  # no GPU: a plain CPU placement
    assert offloaded({"model.embed_tokens": 0, "model.layers.0": "cpu", "lm_head": 0}) == "cpu"
    assert offloaded({"model.embed_tokens": 0, "model.layers.0": "disk"}) == "disk"


def test_static_cache_refused_for_a_target_on_two_devices(toy_pair):
    pair = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="dynamic")
    pair.target.model.lm_head.to("meta")  # parameters now span two devices, as after a split
    with pytest.raises(DraftlabError, match="static cache needs the whole target on one device"):
        TargetRunner(pair.target.model, aux_layers=pair.aux_layers, cache="static")


def _hooked(runner: TargetRunner) -> None:
    """Dispatch the runner's model in place through accelerate's hooks: embedding and the first half of
    the layers in one group, the rest with the norm and lm_head in the other (both on the CPU here)."""
    model = runner.model
    layers = len(model.model.layers)
    device_map = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu", "lm_head": "cpu"}
    device_map.update({f"model.layers.{i}": "cpu" for i in range(layers)})
    dispatch_model(model, device_map=device_map, skip_keys=model._skip_keys_device_placement, force_hooks=True)
    assert hasattr(model.model.layers[layers - 1], "_hf_hook")


def _decode(pair, flags, rows):
    decoder = SpeculativeDecoder(pair.target, pair.drafter, flags)
    out = []
    for row in rows:
        commits = list(decoder.stream(row, max_new_tokens=NEW, ignore_eos=True))
        out.append(([t for c in commits for t in c.tokens], [c.accept_length for c in commits[1:]]))
    return out


def test_accelerate_hooks_leave_decoding_and_probing_unchanged(toy_pair):
    flags = resolve_spec_flags(4, 4, 8)
    rows = [list(t.encode()) for t in TEXTS]
    plain = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="dynamic")
    hooked = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="dynamic")
    _hooked(hooked.target)

    want = _decode(plain, flags, rows)
    assert _decode(hooked, flags, rows) == want
    assert sum(n for _, lengths in want for n in lengths) / sum(len(x) for _, x in want) > 1.5

    conts = [tokens + [0] * (flags.steps + 1) for tokens, _ in want]  # look-ahead past the last cycle
    ref = probe_sequences(plain.target, plain.drafter, rows, conts, flags, max_new_tokens=NEW, batch_size=2)
    got = probe_sequences(hooked.target, hooked.drafter, rows, conts, flags, max_new_tokens=NEW, batch_size=2)
    assert [r.accept_lengths for r in got.results] == [r.accept_lengths for r in ref.results]
    assert [r.accept_lengths[:-1] for r in got.results] == [lengths[:-1] for _, lengths in want]
    batch = torch.tensor([rows[0][:8], rows[1][:8]])
    torch.testing.assert_close(hooked.target.forward_batch(batch).aux, plain.target.forward_batch(batch).aux)
    greedy = target_continuations(hooked.target, rows, NEW, batch_size=2)
    assert greedy == target_continuations(plain.target, rows, NEW, batch_size=2)
    assert greedy == [tokens for tokens, _ in want]  # ignore_eos decoding is the target's greedy text
