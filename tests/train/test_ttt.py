"""The TTT loss against a naive unrolled computation through the decoder's own KV-cache path, and
against SpecForge's own module where its wheel imports."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from helpers import DRAFT_VOCAB, MLA_FIELDS, random_rows, tiny_drafter

from draftlab.train.ttt import TTTBatch, shift_left, teacher_from_logits, ttt_loss

B, N, LENGTH = 2, 7, 3


def _batch(ids, mask, aux, logits, t2d) -> TTTBatch:
    loss_mask = mask[..., None]
    return TTTBatch(shift_left(ids), aux, teacher_from_logits(shift_left(logits), t2d, loss_mask), loss_mask,
                    torch.ones(ids.shape, dtype=torch.bool))


def _naive(drafter, ids, mask, aux, logits, t2d, length):
    """Every row j drafted as a decoder drafts it: prefill rows 0..j over the KV cache, then feed the
    drafter's own output back one position further each step, teacher-forced tokens."""
    ids, logits = shift_left(ids), shift_left(logits).float()
    b, n = ids.shape
    p = logits[..., t2d].softmax(-1)
    top = logits.argmax(-1)
    position_mask = t2d[top].float() * mask
    losses = [torch.zeros(()) for _ in range(length)]
    correct = [0] * length
    for r in range(b):
        for j in range(n):
            drafter.reset()
            step = drafter.forward(ids[r, :j + 1], aux[r, :j + 1])
            out, hidden = step.logits[-1], step.hidden[-1]
            for i in range(length):
                if i:
                    token = ids[r, j + i] if j + i < n else torch.tensor(0)
                    step = drafter.forward(token.reshape(1), hidden.reshape(1, -1), positions=torch.tensor([j + i]))
                    out, hidden = step.logits[0], step.hidden[0]
                if j + i < n:
                    losses[i] = losses[i] - position_mask[r, j + i] * (p[r, j + i] * out.log_softmax(-1)).sum()
                    hit = int(drafter.to_target_ids(out.argmax()) == top[r, j + i])
                    correct[i] += hit * int(mask[r, j + i])
    drafter.reset()
    losses = [loss / (b * n) for loss in losses]
    return sum(0.8 ** i * loss for i, loss in enumerate(losses)), losses, correct


@pytest.mark.parametrize("fields", [{}, MLA_FIELDS], ids=["gqa", "mla"])
def test_ttt_loss_and_gradients_equal_the_unrolled_decoder_computation(fields):
    drafter, t2d = tiny_drafter(**fields)
    ids, mask, aux, logits = random_rows(B, N)
    assert (t2d[logits.argmax(-1)] == 0).any() and (t2d[logits.argmax(-1)] == 1).any()  # both kinds of rows

    result = ttt_loss(drafter, _batch(ids, mask, aux, logits, t2d), length=LENGTH)
    result.loss.backward()
    grads = {k: p.grad.clone() for k, p in drafter.named_parameters() if p.grad is not None}
    drafter.zero_grad()
    total, losses, correct = _naive(drafter, ids, mask, aux, logits, t2d, LENGTH)
    total.backward()

    assert len(grads) == sum(1 for p in drafter.parameters() if p.requires_grad)
    torch.testing.assert_close(result.loss, total, rtol=1e-5, atol=1e-6)
    for got, want in zip(result.step_losses, losses):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert [int(c) for c in result.step_correct] == correct
    for name, p in drafter.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert all(loss > 0 for loss in losses[1:])  # later steps carry loss (not all masked away)


def test_later_steps_depend_on_earlier_steps_keys():
    """Step 2 sees step 1's key at its own row: changing step 1's input changes step 2's loss only."""
    drafter, t2d = tiny_drafter()
    ids, mask, aux, logits = random_rows(B, N)
    base = ttt_loss(drafter, _batch(ids, mask, aux, logits, t2d), length=3)
    changed = ids.clone()
    changed[:, 2:] = (changed[:, 2:] + 1) % 97  # tokens read from step 1 on at rows >= 1
    other = ttt_loss(drafter, _batch(changed, mask, aux, logits, t2d), length=3)
    assert not torch.allclose(base.step_losses[1], other.step_losses[1])


# --- SpecForge's own module -------------------------------------------------------------------------

def _import_specforge():
    """SpecForge's EAGLE-3 trainer module, or None where its wheel does not import here.

    Its ``core/loss.py`` imports triton (for a GPU kernel this test never calls) at module level; on a
    CPU-only torch a stand-in triton is present only while that one module imports. torch's compiler
    is imported before, so it never sees the stand-in."""
    try:
        import torch._dynamo.testing  # noqa: F401
        import torch._inductor.compile_fx  # noqa: F401
        if "specforge.core.loss" not in sys.modules:
            try:
                import triton  # noqa: F401
            except ImportError:
                language = types.ModuleType("triton.language")
                language.constexpr = int
                stand_in = types.ModuleType("triton")
                stand_in.jit, stand_in.language = (lambda f: f), language
                sys.modules.update({"triton": stand_in, "triton.language": language})
                try:
                    import specforge.core.loss  # noqa: F401
                finally:
                    del sys.modules["triton"], sys.modules["triton.language"]
        import specforge.algorithms.eagle3.model as model
        from specforge.core.loss import _compute_loss
        from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    except Exception:  # any import failure means: not importable on this machine
        return None
    return model, _compute_loss, LlamaForCausalLMEagle3


def test_loss_and_gradients_equal_specforge_on_one_batch(monkeypatch):
    imported = _import_specforge()
    if imported is None:
        pytest.skip("SpecForge's wheel does not import here (pip install --no-deps specforge)")
    model, reference_loss, draft_cls = imported
    from helpers import drafter_config
    from transformers import LlamaConfig

    class _ReferenceLoss:  # SpecForge's own reference for its triton kernel, which needs a GPU
        apply = staticmethod(reference_loss)

    monkeypatch.setattr(model, "LogSoftmaxLoss", _ReferenceLoss)
    drafter, t2d = tiny_drafter()
    config = LlamaConfig(**{k: v for k, v in drafter_config().items() if k != "architectures"})
    theirs = draft_cls(config, attention_backend="sdpa")
    state = {**{k: v for k, v in drafter.state_dict().items() if not k.startswith("rotary.")}, "t2d": t2d}
    missing, unexpected = theirs.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k for k in missing)
    ids, mask, aux, logits = random_rows(B, N)
    ours = ttt_loss(drafter, _batch(ids, mask, aux, logits, t2d), length=LENGTH)
    ours.loss.backward()

    trainer = model.OnlineEagle3Model(theirs, length=LENGTH, attention_backend="sdpa")
    with torch.compiler.set_stance("force_eager"):  # its compiled helpers, eagerly on CPU
        out = trainer(input_ids=shift_left(ids), attention_mask=torch.ones_like(ids), target=shift_left(logits),
                      loss_mask=mask[..., None], hidden_states=aux)
    plosses, accs = out[0], out[2]
    torch.testing.assert_close(torch.stack(ours.step_losses), torch.stack([p.float() for p in plosses]),
                               rtol=1e-5, atol=1e-6)
    sum(0.8 ** i * p for i, p in enumerate(plosses)).backward()  # its ploss weights
    theirs_params = dict(theirs.named_parameters())
    compared = 0
    for name, p in drafter.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(p.grad, theirs_params[name].grad, rtol=1e-4, atol=1e-6, msg=name)
            compared += 1
    assert compared == sum(1 for p in drafter.parameters() if p.requires_grad)
    ours_acc = [float(c / n.clamp_min(1e-6)) for c, n in zip(ours.step_correct, ours.step_counted)]
    assert ours_acc == pytest.approx([float(a) for a in accs])
    assert DRAFT_VOCAB == theirs.lm_head.weight.shape[0]


def test_bf16_autocast_path_runs_and_stays_close():
    """The GPU trains under bf16 autocast over float32 weights: the same code on the CPU's autocast."""
    drafter, t2d = tiny_drafter()
    ids, mask, aux, logits = random_rows(B, N)
    exact = ttt_loss(drafter, _batch(ids, mask, aux, logits, t2d), length=LENGTH).loss
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = ttt_loss(drafter, _batch(ids, mask, aux, logits, t2d), length=LENGTH).loss
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    torch.testing.assert_close(loss, exact, rtol=5e-2, atol=0)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in drafter.parameters() if p.requires_grad)
    assert drafter.fc.weight.dtype == torch.float32
