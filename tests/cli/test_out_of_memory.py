"""An allocator running out of memory inside a model-running command ends in one line naming the flags
to lower (with their current values) and exit 2, not a traceback. The error is injected into the
library function each command calls."""

from __future__ import annotations

import pytest
import torch

from draftlab.cli import main
from draftlab.cli.common import is_out_of_memory

CUDA_OOM = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                                  "of 139.8 GiB of which 1.1 GiB is free.\nSee the docs on memory management")
CPU_OOM = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                       "you tried to allocate 1125899906842624 bytes. Error code 12 (Cannot allocate memory)")

# (command line, the library function it calls, what the one line must name)
COMMANDS = [
    (["generate", "--target", "T", "--prompts", "p.jsonl", "--batch-size", "8", "--max-new-tokens", "64"],
     "draftlab.decode.generate.generate", ["--batch-size (now 8)", "--max-new-tokens (now 64)"]),
    (["probe", "--target", "T", "--drafter", "D", "--prompts", "p.jsonl"],
     "draftlab.probe.probe.probe", ["--batch-size (now auto)", "--max-new-tokens (now 128)"]),
    (["drift", "--target-a", "A", "--target-b", "B", "--prompts", "p.jsonl", "--batch-size", "16"],
     "draftlab.probe.drift.drift", ["--batch-size (now 16)", "--max-new-tokens (now 128)"]),
    (["train", "--target", "T", "--out", "O", "--data", "d.jsonl", "--seq-len", "4096"],
     "draftlab.train.trainer.train", ["--batch-size (now 8)", "--seq-len (now 4096)"]),
    (["profile", "--target", "T", "--out", "P.json", "--batch-sizes", "1,64", "--device", "cpu"],
     "draftlab.models.target.TargetRunner.load", ["--batch-sizes (now 1,64)", "--context (now 256)"]),
    (["plan", "--target", "T", "--drafter", "D", "--prompts", "p.jsonl", "--batch-sizes", "1,8"],
     "draftlab.cost.auto_plan.auto_plan", ["--batch-sizes (now 1,8)", "--max-new-tokens (now 128)"]),
    (["assess", "--target", "T", "--drafter", "D", "--prompts", "p.jsonl", "--out", "A"],
     "draftlab.assess.run.assess", ["--batch-sizes (now 1,8,32,64)", "--max-new-tokens (now 128)"]),
    # a command that names no sizes of its own: the entry point's one line (an H200 smoke run's plan
    # ran out of memory beside other jobs and printed a traceback before plan named its sizes)
    (["capture", "--target", "T", "--data", "d.jsonl", "--out", "C"],
     "draftlab.train.capture.capture", ["free the device"]),
]


def _raise(exc: BaseException):
    def fail(*_args, **_kwargs):
        raise exc
    return fail


@pytest.mark.parametrize("exc", [CUDA_OOM, CPU_OOM, MemoryError()], ids=["cuda", "cpu", "python"])
@pytest.mark.parametrize("argv,function,names", COMMANDS, ids=[c[0][0] for c in COMMANDS])
def test_out_of_memory_is_one_line_naming_the_flags(monkeypatch, capsys, tmp_path, argv, function, names, exc):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(function, _raise(exc))
    monkeypatch.setattr("draftlab.cli.deployed.EngineChoice.resolve", lambda *_: None)  # the folders are names only
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("draftlab: error: out of memory")
    assert "Traceback" not in err
    for name in names:
        assert name in err
    if exc is CUDA_OOM:
        assert "Tried to allocate 2.00 GiB" in err and "See the docs" not in err  # first line of torch's only


def test_other_runtime_errors_are_not_taken_for_out_of_memory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("draftlab.decode.generate.generate", _raise(RuntimeError("shape mismatch")))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        main(["generate", "--target", "T", "--prompts", "p.jsonl"])


def test_is_out_of_memory():
    assert is_out_of_memory(CUDA_OOM) and is_out_of_memory(CPU_OOM) and is_out_of_memory(MemoryError())
    assert is_out_of_memory(RuntimeError("HIP out of memory. Tried to allocate 20.00 MiB"))
    assert not is_out_of_memory(RuntimeError("expected scalar type Float")) and not is_out_of_memory(ValueError())
