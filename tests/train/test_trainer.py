"""draftlab train on the toy pair: warm start keeps what it must, resume is exact, OUT serves in both engines."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from draftlab.cli import main
from draftlab.compat import check_pair
from draftlab.toy.corpus import stdlib_text
from draftlab.train.trainer import TrainOptions, train


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    """Training text rows and held-out prompts from the toy corpus."""
    folder = tmp_path_factory.mktemp("train-data")
    text = stdlib_text("train", 12_000).decode("latin-1")
    rows = folder / "data.jsonl"
    rows.write_text("".join(json.dumps({"text": text[i:i + 96]}) + "\n" for i in range(0, len(text), 96)))
    held = stdlib_text("heldout", 2_000).decode("latin-1")
    prompts = folder / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": held[i:i + 40]}) + "\n" for i in range(0, 400, 100)))
    return rows, prompts


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _options(toy_pair, rows: Path, out: Path, **kw) -> TrainOptions:
    base = dict(target=toy_pair.target_dir, data=rows, out=out, max_steps=6, batch_size=4, seq_len=64, lr=2e-3,
                warmup=2, ttt_length=3)
    return TrainOptions(**{**base, **kw})


def test_warm_start_json_keeps_vocabulary_and_serves_in_both_engines(toy_pair, data, tmp_path, capsys):
    rows, prompts = data
    before = _digest(toy_pair.drafter_dir)
    out = tmp_path / "out"
    code = main(["train", "--target", str(toy_pair.target_dir), "--data", str(rows), "--out", str(out),
                 "--init", str(toy_pair.drafter_dir), "--max-steps", "4", "--batch-size", "4", "--seq-len", "64",
                 "--ttt-length", "3", "--lr", "1e-3", "--eval-prompts", str(prompts), "--eval-every", "2",
                 "--eval-max-new-tokens", "16", "--steps", "3", "--topk", "1", "--num-draft-tokens", "4", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"out", "init", "vocab", "steps", "tokens", "tokens_per_second", "final_loss",
                        "accuracy_by_step", "eval"}
    assert doc["vocab"] == "kept" and doc["steps"] == 4 and doc["init"] == str(toy_pair.drafter_dir)
    assert doc["tokens"] == 4 * 4 * 64 and len(doc["accuracy_by_step"]) == 3
    assert [e["step"] for e in doc["eval"]] == [2, 4] and all(e["accept_length"] >= 1 for e in doc["eval"])
    assert _digest(toy_pair.drafter_dir) == before  # the input folder is only read

    old, new = load_file(str(toy_pair.drafter_dir / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert torch.equal(old["d2t"], new["d2t"]) and torch.equal(old["t2d"], new["t2d"])
    assert set(new) == set(old)
    assert not torch.equal(old["fc.weight"], new["fc.weight"])  # it trained
    old_cfg = json.loads((toy_pair.drafter_dir / "config.json").read_text())
    assert json.loads((out / "config.json").read_text()) == old_cfg  # the toy config already names both fields
    for engine in ("sglang", "vllm"):
        result = check_pair(out, toy_pair.target_dir, engine)
        assert result.ok, [f.code for f in result.findings if f.severity == "error"]
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [1, 2, 3, 4]
    assert (out / "train.png").stat().st_size > 0


def test_warm_start_with_no_learning_keeps_every_tensor_bit_identical(toy_pair, data, tmp_path):
    rows, _ = data
    out = tmp_path / "out"
    train(_options(toy_pair, rows, out, init=toy_pair.drafter_dir, lr=0.0, max_steps=2))
    old, new = load_file(str(toy_pair.drafter_dir / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert set(old) == set(new)
    for name in old:
        assert old[name].dtype == new[name].dtype and torch.equal(old[name], new[name]), name


def test_warm_start_from_speculators_layout_trains_as_from_specforge(toy_pair, data, tmp_path):
    """vLLM's layout (speculators_config, layers.0.*) starts the same run: convert's copy, input untouched."""
    from draftlab.compat.convert import convert_drafter

    rows, _ = data
    spec = convert_drafter(toy_pair.drafter_dir, "speculators", tmp_path / "spec", target=toy_pair.target_dir).out
    assert json.loads((spec / "config.json").read_text()).get("speculators_config")
    before = _digest(spec)
    runs = {}
    for name, init in (("specforge", toy_pair.drafter_dir), ("speculators", spec)):
        runs[name] = train(_options(toy_pair, rows, tmp_path / name, init=init, max_steps=3))
    assert runs["speculators"].vocab == "kept" and _digest(spec) == before
    assert runs["speculators"].final_loss == runs["specforge"].final_loss
    a, b = (load_file(str(tmp_path / n / "model.safetensors")) for n in ("specforge", "speculators"))
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert check_pair(tmp_path / "speculators", toy_pair.target_dir, "sglang").ok


def test_resume_after_a_stop_reproduces_the_uninterrupted_run(toy_pair, data, tmp_path):
    rows, _ = data
    whole = train(_options(toy_pair, rows, tmp_path / "whole", init=toy_pair.drafter_dir))
    stopped = train(_options(toy_pair, rows, tmp_path / "split", init=toy_pair.drafter_dir),
                    on_step=lambda step: step == 3)
    assert stopped.interrupted and stopped.steps == 3
    resumed = train(_options(toy_pair, rows, tmp_path / "split", init=toy_pair.drafter_dir, resume=True))
    assert resumed.steps == 6 and resumed.vocab == "kept"

    def losses(folder: Path) -> list[float]:
        return [json.loads(line)["loss"] for line in (folder / "train_log.jsonl").read_text().splitlines()]

    assert losses(tmp_path / "split") == losses(tmp_path / "whole")
    assert len(set(losses(tmp_path / "whole"))) == 6  # a curve, not a constant
    a = load_file(str(tmp_path / "whole" / "model.safetensors"))
    b = load_file(str(tmp_path / "split" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert whole.final_loss == resumed.final_loss


def test_from_scratch_builds_the_vocabulary_vocab_build_would(toy_pair, data, tmp_path):
    from draftlab.vocab.build import build_mapping
    from draftlab.vocab.count import count_tokens

    rows, _ = data
    out = tmp_path / "out"
    result = train(_options(toy_pair, rows, out, draft_vocab_size=64, max_steps=2, aux_layers=[0, 1, 2]))
    assert result.vocab == "built" and result.init is None
    expected = build_mapping(count_tokens([rows], toy_pair.target_dir, workers=1), 64)
    tensors = load_file(str(out / "model.safetensors"))
    assert np.array_equal(tensors["d2t"].numpy(), expected.d2t) and np.array_equal(tensors["t2d"].numpy(), expected.t2d)
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert config["draft_vocab_size"] == 64 and config["num_hidden_layers"] == 1
    assert "embed_tokens.weight" not in tensors
    for engine in ("sglang", "vllm"):
        assert check_pair(out, toy_pair.target_dir, engine).ok


def test_bad_inputs_are_one_line_errors(toy_pair, data, tmp_path, capsys):
    rows, _ = data
    out = tmp_path / "exists"
    out.mkdir()
    code = main(["train", "--target", str(toy_pair.target_dir), "--data", str(rows), "--out", str(out),
                 "--max-steps", "1"])
    assert code == 2 and "already exists" in capsys.readouterr().err
    code = main(["train", "--target", str(toy_pair.target_dir), "--data", str(rows), "--out", str(tmp_path / "n"),
                 "--max-steps", "1", "--batch-size", "3", "--grad-accum", "2"])
    assert code == 2 and "--batch-size 3" in capsys.readouterr().err
    assert not (tmp_path / "n").exists()


def test_input_ids_rows_need_no_tokenizer(toy_pair, tmp_path, capsys):
    """A target folder without a tokenizer (a random 8B-shaped one, say) trains on input_ids rows, as
    vocab count counts them; a text row then fails naming its line."""
    import shutil

    target = tmp_path / "target"
    shutil.copytree(toy_pair.target_dir, target)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (target / name).unlink(missing_ok=True)
    text = stdlib_text("train", 4_000)
    rows = tmp_path / "ids.jsonl"
    rows.write_text("".join(json.dumps({"input_ids": list(text[i:i + 96])}) + "\n" for i in range(0, len(text), 96)))
    result = train(TrainOptions(target=target, data=rows, out=tmp_path / "out", max_steps=2, batch_size=4, seq_len=64,
                                draft_vocab_size=64, aux_layers=[0, 1, 2], ttt_length=2))
    assert result.steps == 2 and result.vocab == "built"
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(rows.read_text() + json.dumps({"text": "def f():"}) + "\n")
    code = main(["train", "--target", str(target), "--data", str(mixed), "--out", str(tmp_path / "out2"),
                 "--max-steps", "1", "--draft-vocab-size", "64", "--aux-layers", "0,1,2"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert "line 43: a 'text' row needs the target's tokenizer" in err.strip().splitlines()[-1], err


def test_training_curve_equals_the_dense_formulation(toy_pair, data, tmp_path, monkeypatch):
    """The memory-bounded TTT kernels train as the n x n formulation they replaced: the same loss and
    per-step accuracy at every step of a fine-tuning run, up to float32 rounding."""
    from ttt_reference import dense_ttt_loss

    from draftlab.train import trainer

    rows, _ = data
    new = train(_options(toy_pair, rows, tmp_path / "new", init=toy_pair.drafter_dir, ttt_length=4))
    monkeypatch.setattr(trainer, "ttt_loss", lambda drafter, batch, length, kernels=None:
                        dense_ttt_loss(drafter, batch, length))
    old = train(_options(toy_pair, rows, tmp_path / "old", init=toy_pair.drafter_dir, ttt_length=4))

    def log(folder: Path) -> list[dict]:
        return [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]

    new_log, old_log = log(tmp_path / "new"), log(tmp_path / "old")
    assert len(new_log) == len(old_log) == 6
    assert [e["loss"] for e in new_log] == pytest.approx([e["loss"] for e in old_log], rel=1e-4)
    assert [e["correct"] for e in new_log] == [e["correct"] for e in old_log]
    assert new_log[-1]["loss"] < new_log[0]["loss"]  # it learns
    assert new.final_loss == pytest.approx(old.final_loss, rel=1e-4)


def test_flex_kernels_that_do_not_fit_the_gpu_give_way_to_the_blocked_kernel(toy_pair, data, tmp_path, monkeypatch):
    """On an H200 flex attention's Triton tiles can ask for more shared memory than the GPU has (the GPU smoke
    run: an MLA drafter's 192-wide heads, and the 8B EAGLE-3.1 drafter at batch 4 x 256). The trainer then
    reruns the step on the exact blocked kernel and says so: the run equals one on the blocked kernel
    throughout, bit for bit. Any other error still stops it."""
    from draftlab.models.kernels import kernel_unavailable
    from draftlab.train.ttt import TTTKernels

    rows, _ = data

    def triton_refuses():
        def flex(*args, **kwargs):
            raise RuntimeError("No valid triton configs. OutOfMemoryError: out of resource: "
                               "triton_tem_fused_flex_attention_0 Required: 346368 Hardware limit:232448")
        return flex

    def blocked_run(out):
        train(_options(toy_pair, rows, out, init=toy_pair.drafter_dir, max_steps=3))
        return load_file(str(out / "model.safetensors"))

    want = blocked_run(tmp_path / "blocked")
    monkeypatch.setattr(TTTKernels, "for_device", classmethod(lambda cls, *a, **k: cls("flex", False)))
    monkeypatch.setattr("draftlab.train.ttt_attention.compiled_flex", triton_refuses)
    result = train(_options(toy_pair, rows, tmp_path / "fell-back", init=toy_pair.drafter_dir, max_steps=3))
    got = load_file(str(tmp_path / "fell-back" / "model.safetensors"))
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert any("exact blocked kernel" in note and "out of resource" in note for note in result.notes)

    def broken():
        def flex(*args, **kwargs):
            raise RuntimeError("something else went wrong")
        return flex

    monkeypatch.setattr("draftlab.train.ttt_attention.compiled_flex", broken)
    with pytest.raises(RuntimeError, match="something else"):
        train(_options(toy_pair, rows, tmp_path / "broken", init=toy_pair.drafter_dir, max_steps=3))
    assert kernel_unavailable(RuntimeError("x")) is False


def test_a_machine_where_torch_compile_cannot_build_trains_uncompiled(toy_pair, data, tmp_path, monkeypatch):
    """No Triton or C compiler (here a torch.compile backend that raises): the trainer reruns the first
    step uncompiled on the blocked kernel and says so; the run equals an uncompiled one bit for bit."""
    from draftlab.train import ttt
    from draftlab.train.ttt import TTTKernels

    rows, _ = data

    def no_compiler(gm, example_inputs):
        raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")

    def run(out):
        result = train(_options(toy_pair, rows, out, init=toy_pair.drafter_dir, max_steps=3))
        return result, load_file(str(out / "model.safetensors"))

    _, want = run(tmp_path / "eager")
    monkeypatch.setattr(TTTKernels, "for_device", classmethod(lambda cls, *a, **k: cls("blocked", True)))
    monkeypatch.setattr(ttt, "_compiled", lambda fn: torch.compile(fn, backend=no_compiler))
    result, got = run(tmp_path / "fell-back")
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert any("torch.compile cannot build" in note and "C compiler" in note for note in result.notes)
