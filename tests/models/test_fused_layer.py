"""The fused layers (one QKV and one gate_up GEMM) keep one copy of the weights, leave HF's own forward
as it was, and decode the tokens HF's model computes (greedy, float32, CPU) on both static paths:
the batch-1 StaticTarget and the batched target, eager or with the step compiled."""

from __future__ import annotations

import pytest
import torch
from tiny_targets import tiny_target

from draftlab.decode.decoder import SpeculativeDecoder
from draftlab.decode.plain_decode import plain_decode
from draftlab.models import kernels
from draftlab.models.fused_layer import FusedLayer
from draftlab.models.target import TargetRunner
from draftlab.models.target_batch import BatchTarget
from draftlab.models.target_static import FAMILIES, LayerWalk

PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12], [11, 12, 13]]  # longer than mistral's window of 6
NEW = 20


def _no_cache_greedy(family: str, prompt: list[int], n: int) -> list[int]:
    """HF's own model (a fresh, unfused copy of the same weights), a full forward per token."""
    model = tiny_target(family)
    seq = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(prompt):]


def _storage_bytes(model: torch.nn.Module) -> int:
    return sum({p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_fusing_keeps_one_copy_and_hf_forward_unchanged(family: str) -> None:
    model = tiny_target(family)
    ids = torch.tensor([PROMPTS[0]])
    with torch.inference_mode():
        before, bytes_before = model(ids).logits, _storage_bytes(model)
        walk = LayerWalk(model, [0, 2, 4], {"all": None})
        after = model(ids).logits
    assert walk.fused is not None and all(isinstance(f, FusedLayer) for f in walk.fused)
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    fused = walk.fused[0]
    assert attn.q_proj.weight.data_ptr() == fused.qkv.data_ptr()
    assert attn.v_proj.weight.data_ptr() == fused.qkv[attn.q_proj.out_features + attn.k_proj.out_features].data_ptr()
    assert mlp.up_proj.weight.data_ptr() == fused.gate_up[mlp.gate_proj.out_features].data_ptr()
    assert _storage_bytes(model) == bytes_before  # views of the fused weights, not a second copy
    assert LayerWalk(model, [0], {"all": None}).fused[0].qkv is fused.qkv  # fused once per model
    torch.testing.assert_close(after, before, rtol=0, atol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_and_batch_one_static_paths_decode_hfs_greedy_tokens(family: str) -> None:
    expected = [_no_cache_greedy(family, p, NEW) for p in PROMPTS]
    model = tiny_target(family)
    runner = TargetRunner(model, cache="dynamic")
    target = BatchTarget(runner, len(PROMPTS), 40)
    assert target._walk.fused is not None
    assert plain_decode(target, PROMPTS, NEW) == expected
    static = TargetRunner(model, cache="static", max_len=64)
    decoder = SpeculativeDecoder(static, None, None)
    one = [[t for c in decoder.stream(p, max_new_tokens=NEW, ignore_eos=True) for t in c.tokens] for p in PROMPTS]
    assert one == expected


def test_compiled_decode_step_runs_on_cpu_and_decodes_hfs_greedy_tokens() -> None:
    """``compile`` (the fused layers' elementwise parts through torch.compile) on a tiny model, eager
    CPU: the same tokens, and the compiled functions are what ran."""
    expected = [_no_cache_greedy("llama", p, NEW) for p in PROMPTS]
    runner = TargetRunner(tiny_target("llama"), cache="dynamic")
    target = BatchTarget(runner, len(PROMPTS), 40, compile=True)
    assert plain_decode(target, PROMPTS, NEW) == expected
    assert _compiled_here() == {"attention_input", "layer_output"}


def test_fusing_in_inference_mode_leaves_plain_parameters() -> None:
    """The probe builds its batched target in inference mode; the model must stay usable outside it."""
    model = tiny_target("llama")
    with torch.inference_mode():
        LayerWalk(model, [0], {"all": None})
    weight = model.model.layers[0].mlp.gate_proj.weight
    assert isinstance(weight, torch.nn.Parameter) and not weight.is_inference()
    with torch.no_grad():
        weight.mul_(1.0)  # an in-place update, refused on an inference tensor outside inference mode


def _compiled_here() -> set[str]:
    """The fused layer's functions this process has compiled."""
    prefix = "draftlab.models.fused_layer."
    return {name.removeprefix(prefix) for name in kernels._compiled if name.startswith(prefix)}


def _no_compiler(fn):
    """torch.compile as on a machine without a C compiler: it fails when the function first runs."""
    def backend(gm, example_inputs):
        raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")
    return torch.compile(fn, backend=backend)


def test_decode_goes_on_without_compile_where_torch_compile_cannot_build(monkeypatch, capsys) -> None:
    """A machine where torch.compile fails (no Triton, no C compiler: here a backend that raises) still
    decodes, without the compiled parts: HF's tokens, ``compile`` off afterwards, one warning line.
    Any other error is not taken for it."""
    from draftlab.models import fused_layer

    monkeypatch.setattr(fused_layer, "compiled_fn", _no_compiler)
    expected = [_no_cache_greedy("llama", p, NEW) for p in PROMPTS]
    target = BatchTarget(TargetRunner(tiny_target("llama"), cache="dynamic"), len(PROMPTS), 40, compile=True)
    assert plain_decode(target, PROMPTS, NEW) == expected
    assert target.compile is False
    err = capsys.readouterr().err
    assert err.count("torch.compile cannot build the decode step") == 1 and "C compiler" in err

    broken = BatchTarget(TargetRunner(tiny_target("llama"), cache="dynamic"), len(PROMPTS), 40, compile=True)
    monkeypatch.setattr(broken, "_greedy_step", lambda *a: (_ for _ in ()).throw(ValueError("a real bug")))
    broken._decode_steps = broken._step_runners()
    with pytest.raises(ValueError, match="a real bug"):
        plain_decode(broken, PROMPTS, NEW)


@pytest.mark.parametrize("family", FAMILIES)
def test_cache_free_walk_gives_hfs_hidden_states_and_aux(family: str, monkeypatch) -> None:
    """``forward_batch`` on the fast path's device walks the fused layers causally, with no cache: the
    final hidden states and aux features of HF's own pass, right-padded rows included. A window
    shorter than the pass (mistral's 6 here) keeps HF's pass."""
    from draftlab.models import target as target_module

    torch.manual_seed(0)
    short, long = torch.randint(0, 97, (2, 6)), torch.randint(0, 97, (2, 9))
    hf = TargetRunner(tiny_target(family), aux_layers=[0, 2, 3], cache="dynamic")
    wanted = [hf.forward_batch(batch) for batch in (short, long)]  # on the CPU: HF's pass
    monkeypatch.setattr(target_module, "STATIC_BY_DEFAULT", ("cpu",))
    runner = TargetRunner(tiny_target(family), aux_layers=[0, 2, 3], cache="dynamic")
    for batch, want in zip((short, long), wanted):
        got = runner.forward_batch(batch)
        torch.testing.assert_close(got.aux, want.aux, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.hidden, want.hidden, rtol=1e-5, atol=1e-5)
    walked = runner._causal_walk(long.shape[1]) is not None
    assert walked == (family != "mistral") and runner._causal_walk(short.shape[1]) is not None


def test_compiled_parts_take_every_width_and_batch_size(monkeypatch, capsys) -> None:
    """Compiled, the walk serves a trainer's changing widths and the decode a server's changing batch
    sizes, more of each than dynamo's recompile limit (8), with HF's results and without falling back
    (sizes become dynamic on their second value)."""
    from draftlab.models import target as target_module

    hf = TargetRunner(tiny_target("llama"), aux_layers=[0, 2, 3], cache="dynamic")
    torch.manual_seed(1)
    batches = [torch.randint(0, 97, (2, width)) for width in (7, 12, 5, 9, 3, 15, 11, 6, 13, 4)]
    wanted = [hf.forward_batch(batch) for batch in batches]  # on the CPU: HF's pass
    monkeypatch.setattr(target_module, "STATIC_BY_DEFAULT", ("cpu",))
    monkeypatch.setattr(kernels, "_compiled", {})
    runner = TargetRunner(tiny_target("llama"), aux_layers=[0, 2, 3], cache="dynamic")
    for batch, want in zip(batches, wanted):
        got = runner.forward_batch(batch, compiled=True)
        torch.testing.assert_close(got.aux, want.aux, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.hidden, want.hidden, rtol=1e-5, atol=1e-5)

    expected = _no_cache_greedy("llama", PROMPTS[0], 4)
    plain = TargetRunner(tiny_target("llama"), cache="dynamic")
    for size in range(1, 12):
        target = BatchTarget(plain, size, 40, compile=True)
        assert plain_decode(target, [PROMPTS[0]] * size, 4) == [expected] * size
        assert target.compile, f"batch {size} fell back to eager"
    assert "cannot build" not in capsys.readouterr().err
    assert _compiled_here() == {"attention_input", "layer_output"}


def test_batch_one_static_step_compiled_and_without_a_compiler(monkeypatch, capsys) -> None:
    """The batch-1 static target (generate's verify) runs its bucketed steps with the layers' parts
    compiled (the default on CUDA): HF's greedy tokens. Where torch.compile cannot build, it goes on
    without them: the same tokens, ``compile`` off, one warning line."""
    from draftlab.models import fused_layer

    expected = [_no_cache_greedy("llama", p, NEW) for p in PROMPTS]

    def decode(runner: TargetRunner) -> list[list[int]]:
        decoder = SpeculativeDecoder(runner, None, None)
        return [[t for c in decoder.stream(p, max_new_tokens=NEW, ignore_eos=True) for t in c.tokens] for p in PROMPTS]

    compiled = TargetRunner(tiny_target("llama"), cache="static", max_len=64, compile=True)
    assert decode(compiled) == expected and compiled._static.compile
    monkeypatch.setattr(fused_layer, "compiled_fn", _no_compiler)
    broken = TargetRunner(tiny_target("llama"), cache="static", max_len=64, compile=True)
    assert decode(broken) == expected
    assert broken._static.compile is False
    err = capsys.readouterr().err
    assert err.count("torch.compile cannot build the target's step") == 1 and "C compiler" in err


def test_compiled_parts_round_as_eager_in_bfloat16(monkeypatch) -> None:
    """In bfloat16 the compiled walk gives the eager walk's hidden states and aux features bit for bit:
    inductor rounds where eager rounds (``emulate_precision_casts``), so a compiled verify or decode and
    the probe's uncompiled pass compute the same numbers. Without it about half the elements differ."""
    from draftlab.models import target as target_module

    monkeypatch.setattr(target_module, "STATIC_BY_DEFAULT", ("cpu",))
    monkeypatch.setattr(kernels, "_compiled", {})
    runner = TargetRunner(tiny_target("llama").to(torch.bfloat16), aux_layers=[0, 2, 3], cache="dynamic")
    batch = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(2))
    eager, compiled = runner.forward_batch(batch), runner.forward_batch(batch, compiled=True)
    assert eager.hidden.dtype == torch.bfloat16
    assert torch.equal(compiled.hidden, eager.hidden) and torch.equal(compiled.aux, eager.aux)
