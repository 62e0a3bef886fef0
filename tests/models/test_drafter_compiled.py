"""The drafter's steps with the work around attention through torch.compile (``use_static_cache(compile=True)``,
``DRAFTLAB_DRAFTER=compiled``) compute what its eager steps compute: close in float32, bit for bit in
bfloat16 (inductor rounds where eager rounds), for the drafters teams hold (Llama, two layers,
speculators' norm_before_fc + norm_output, an EAGLE-3.1 MLA drafter, a Qwen3 one on a sliding
window), and the compiled functions are what ran. The toy pair decodes the same tokens with it; without a compiler the steps go on eagerly."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from test_drafter_static import _script
from tiny_drafters import H, drafter_tensors, qk_norms, write_specforge, write_speculators
from tiny_mla import mla_config, mla_tensors, write_mla

from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.documents import provenance
from draftlab.engines.sglang_flags import SpecFlags
from draftlab.errors import DraftlabError
from draftlab.models import drafter as drafter_module
from draftlab.models import kernels
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.pair import load_pair


def _speculators(folder: Path) -> Path:
    """speculators' defaults: input_norm over the features before fc, norm(out) fed back."""
    tensors = drafter_tensors()
    tensors["input_norm.weight"] = 1 + 0.3 * torch.randn(3 * H, generator=torch.Generator().manual_seed(9))
    write_specforge(folder, tensors)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "norm_before_fc": True, "norm_output": True}))
    return folder


KINDS: dict[str, Callable[[Path], Path]] = {
    "llama": lambda d: write_specforge(d, drafter_tensors()),
    "two-layers": lambda d: write_specforge(d, drafter_tensors(layers=2), layers=2),
    "speculators-defaults": _speculators,
    "mla-eagle3.1": lambda d: write_mla(d, mla_tensors(fc_norm=True), mla_config(fc_norm=True, norm_output=True)),
    "qwen3-sliding-window": lambda d: write_speculators(d, qk_norms(drafter_tensors()), fields={
        "model_type": "qwen3", "layer_types": ["sliding_attention"], "sliding_window": 5, "use_sliding_window": True}),
}
PARTS = {"_combine", "_rope", "_first_input", "_first_output", "_head"}


@pytest.fixture
def ran(monkeypatch) -> set[str]:
    """The names of the drafter's compiled functions called from here on, compiled afresh (dynamo's
    recompile limit counts per process, and each test brings other modules, dtypes and shapes)."""
    torch._dynamo.reset()
    monkeypatch.setattr(kernels, "_compiled", {})
    called: set[str] = set()

    def recording(fn):
        compiled = kernels.compiled_fn(fn)

        def run(*args):
            called.add(fn.__name__)
            return compiled(*args)
        return run

    monkeypatch.setattr(drafter_module, "compiled_fn", recording)
    return called


@pytest.mark.parametrize("kind", list(KINDS))
def test_compiled_steps_compute_the_eager_steps(tmp_path, kind: str, ran: set[str]) -> None:
    folder = KINDS[kind](tmp_path / "d")
    for dtype in ("float32", "bfloat16"):
        eager = Eagle3Drafter.load(folder, dtype=dtype).use_static_cache(96)
        compiled = Eagle3Drafter.load(folder, dtype=dtype).use_static_cache(96, compile=True)
        got, want = _script(compiled), _script(eager)
        assert compiled._compile, "the compiled drafter fell back to eager"
        for a, b in zip(got, want, strict=True):
            if dtype == "float32":
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            else:
                assert torch.equal(a, b)
    assert ran == PARTS | ({"_extra_input", "_extra_output"} if kind == "two-layers" else set())


def _decode(pair, prompts: list[bytes], flags: SpecFlags) -> tuple[list[list[int]], list[list[int]]]:
    decoder = SpeculativeDecoder(pair.target, pair.drafter, flags)
    tokens, lengths = [], []
    for prompt in prompts:
        commits = list(decoder.stream(list(prompt), max_new_tokens=24, ignore_eos=True))
        tokens.append([t for c in commits for t in c.tokens])
        lengths.append([c.accept_length for c in commits[1:]])
    return tokens, lengths


PROMPTS = [b"def __init__(self", b"import os\nimport sys\n", b"    return self._"]


def test_the_toy_pair_decodes_the_same_with_the_drafter_compiled(toy_pair, monkeypatch, ran: set[str]) -> None:
    """generate's loop over the toy pair with both static steps compiled (as ``generate`` loads them for a
    long decode on CUDA with ``DRAFTLAB_DRAFTER=compiled``): the eager decode's tokens and accept lengths,
    which are far from all ones."""
    flags = SpecFlags(steps=3, topk=2, num_draft_tokens=6, source="explicit")
    want = _decode(load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="static", max_len=128), PROMPTS, flags)
    monkeypatch.setenv(kernels.DRAFTER_ENV, "compiled")
    kernels.drafter_compile_chosen.cache_clear()
    try:
        pair = load_pair(toy_pair.target_dir, toy_pair.drafter_dir, cache="static", max_len=128, compile=True)
        assert provenance()["drafter"] == "compiled"
    finally:
        kernels.drafter_compile_chosen.cache_clear()
    assert pair.drafter._compile
    assert _decode(pair, PROMPTS, flags) == want
    assert ran == PARTS
    lengths = [n for row in want[1] for n in row]
    assert sum(lengths) / len(lengths) > 2


def test_without_the_switch_or_a_compiler_the_drafter_runs_eagerly(tmp_path, monkeypatch, capsys) -> None:
    """The switch's default is eager, a wrong value is one clear error, and where torch.compile cannot
    build the drafter's steps go on eagerly (the same outputs) after one line saying so."""
    assert kernels.drafter_compile_chosen() is False and provenance()["drafter"] == "eager"
    monkeypatch.setenv(kernels.DRAFTER_ENV, "fast")
    kernels.drafter_compile_chosen.cache_clear()
    try:
        with pytest.raises(DraftlabError, match="DRAFTLAB_DRAFTER='fast'.*eager or compiled"):
            kernels.drafter_compile_chosen()
    finally:
        kernels.drafter_compile_chosen.cache_clear()

    def no_compiler(fn):
        def backend(gm, example_inputs):
            raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")
        return torch.compile(fn, backend=backend)

    folder = write_specforge(tmp_path / "d", drafter_tensors())
    want = _script(Eagle3Drafter.load(folder).use_static_cache(96))
    monkeypatch.setattr(drafter_module, "compiled_fn", no_compiler)
    broken = Eagle3Drafter.load(folder).use_static_cache(96, compile=True)
    for got, expected in zip(_script(broken), want, strict=True):
        assert torch.equal(got, expected)
    assert broken._compile is False
    err = capsys.readouterr().err
    assert err.count("torch.compile cannot build the drafter's step") == 1 and "C compiler" in err
