from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from draftlab.cli import main
from draftlab.errors import DraftlabError
from draftlab.vocab import VocabMapping, remap_drafter

from .helpers import make_drafter, make_target, tree_bytes

VOCAB = 120
OLD_IDS = [0, 3, 4, 10, 11, 12, 50, 51, 90, 119]
NEW_IDS = [1, 3, 10, 12, 13, 50, 60, 61, 90, 100, 110, 119]  # 6 kept, 6 new, 4 dropped


def row_of(tensors: dict[str, torch.Tensor], ids: list[int], token: int) -> torch.Tensor:
    return tensors["lm_head.weight"][ids.index(token)]


@pytest.mark.parametrize("layout", ["specforge", "speculators"])
def test_remap_keeps_shared_rows_bit_exactly(tmp_path: Path, layout: str) -> None:
    drafter = make_drafter(tmp_path / "d", VocabMapping.from_target_ids(OLD_IDS, VOCAB), layout=layout)
    before = tree_bytes(drafter)
    new = VocabMapping.from_target_ids(NEW_IDS, VOCAB)
    result = remap_drafter(drafter, new, tmp_path / "out", init="zeros")

    assert tree_bytes(drafter) == before  # input untouched
    assert (result.kept, result.new, result.dropped) == (6, 6, 4)
    assert result.new_tokens == [1, 13, 60, 61, 100, 110] and result.dropped_tokens == [0, 4, 11, 51]
    old_t = load_file(str(drafter / "model.safetensors"))
    new_t = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert new_t["lm_head.weight"].shape == (12, 32) and new_t["lm_head.weight"].dtype == torch.bfloat16
    for token in set(OLD_IDS) & set(NEW_IDS):
        old_row, new_row = row_of(old_t, OLD_IDS, token), row_of(new_t, NEW_IDS, token)
        assert old_row.view(torch.int16).equal(new_row.view(torch.int16))  # same bits
    for token in result.new_tokens:
        assert not row_of(new_t, NEW_IDS, token).any()
    assert torch.equal(new_t["d2t"], torch.from_numpy(new.d2t)) and torch.equal(new_t["t2d"], torch.from_numpy(new.t2d))
    for name in old_t.keys() - {"lm_head.weight", "d2t", "t2d"}:
        assert old_t[name].dtype == new_t[name].dtype
        assert old_t[name].view(torch.uint8).equal(new_t[name].view(torch.uint8)), name
    assert set(new_t) == set(old_t)
    config_in = json.loads((drafter / "config.json").read_text())
    config_out = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config_out == {**config_in, "draft_vocab_size": 12}
    assert VocabMapping.from_drafter(tmp_path / "out").target_ids.tolist() == NEW_IDS


def test_remap_initialisations(tmp_path: Path) -> None:
    drafter = make_drafter(tmp_path / "d", VocabMapping.from_target_ids(OLD_IDS, VOCAB))
    new = VocabMapping.from_target_ids(NEW_IDS, VOCAB)
    old_head = load_file(str(drafter / "model.safetensors"))["lm_head.weight"]

    remap_drafter(drafter, new, tmp_path / "mean", init="mean")
    head = load_file(str(tmp_path / "mean" / "model.safetensors"))["lm_head.weight"]
    assert torch.equal(head[NEW_IDS.index(60)], old_head.float().mean(0).to(torch.bfloat16))

    for tied in (False, True):
        target = make_target(tmp_path / f"target{tied}", VOCAB, tied=tied)
        out = tmp_path / f"warm{tied}"
        result = remap_drafter(drafter, new, out, target=target)  # target-lm-head is the default with --target
        assert result.init == "target-lm-head"
        head = load_file(str(out / "model.safetensors"))["lm_head.weight"]
        source = load_file(str(target / "model.safetensors"))
        target_head = source["model.embed_tokens.weight" if tied else "lm_head.weight"]
        for token in result.new_tokens:
            assert torch.equal(head[NEW_IDS.index(token)], target_head[token])


def test_remap_bad_inputs_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    drafter = make_drafter(tmp_path / "d", VocabMapping.from_target_ids(OLD_IDS, VOCAB))
    VocabMapping.from_target_ids(NEW_IDS, VOCAB).save(tmp_path / "new.safetensors")
    VocabMapping.from_target_ids([1, 2], VOCAB + 8).save(tmp_path / "other.safetensors")
    wide = make_target(tmp_path / "wide", VOCAB, hidden=48)
    out = tmp_path / "out"
    cases = [
        (["--mapping", str(tmp_path / "other.safetensors")], "covers a 128-token target vocabulary"),
        (["--mapping", str(tmp_path / "new.safetensors"), "--init", "target-lm-head"], "needs --target"),
        (["--mapping", str(tmp_path / "new.safetensors"), "--target", str(wide)],
         "needs equal hidden sizes (drafter 32, target 48)"),
        (["--mapping", str(tmp_path / "new.safetensors"), "--init", "noise"], "unknown --init 'noise'"),
        (["--mapping", str(tmp_path / "missing.pt")], "no such mapping file"),
    ]
    for args, needle in cases:
        assert main(["vocab", "remap", str(drafter), "-o", str(out), *args]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    out.mkdir()
    assert main(["vocab", "remap", str(drafter), "-o", str(out), "--mapping", str(tmp_path / "new.safetensors")]) == 2
    assert "already exists" in capsys.readouterr().err


def test_cli_remap_json_summary(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    drafter = make_drafter(tmp_path / "d", VocabMapping.from_target_ids(OLD_IDS, VOCAB), layout="speculators")
    VocabMapping.from_target_ids(NEW_IDS, VOCAB).save(tmp_path / "new.pt", "pt")
    assert main(["vocab", "remap", str(drafter), "--mapping", str(tmp_path / "new.pt"), "-o",
                 str(tmp_path / "out"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["layout"], doc["kept"], doc["new"], doc["dropped"], doc["init"]) == ("speculators", 6, 6, 4, "mean")


def test_remap_refuses_a_drafter_whose_mapping_disagrees_with_its_head(tmp_path: Path) -> None:
    drafter = make_drafter(tmp_path / "d", VocabMapping.from_target_ids(OLD_IDS, VOCAB))
    tensors = load_file(str(drafter / "model.safetensors"))
    tensors["d2t"] = tensors["d2t"][:-1].contiguous()
    from safetensors.torch import save_file

    save_file(tensors, str(drafter / "model.safetensors"))
    with pytest.raises(DraftlabError, match="t2d is true at 1 target ids that no draft id maps to"):
        remap_drafter(drafter, VocabMapping.from_target_ids(NEW_IDS, VOCAB), tmp_path / "out")


@pytest.mark.parametrize("layout, engines", [("specforge", ["sglang", "vllm"]), ("speculators", ["vllm"])])
def test_remapped_drafter_passes_check(tmp_path: Path, layout: str, engines: list[str]) -> None:
    from draftlab.compat import check_pair

    target = make_target(tmp_path / "target", VOCAB)
    drafter = make_drafter(tmp_path / "d", VocabMapping.from_target_ids(OLD_IDS, VOCAB), layout=layout)
    out = tmp_path / "out"
    remap_drafter(drafter, VocabMapping.from_target_ids(NEW_IDS, VOCAB), out, target=target)
    for engine in engines:
        assert check_pair(drafter, target, engine).ok  # the input passes, so the comparison is fair
        result = check_pair(out, target, engine)
        assert result.ok, [f.message for f in result.findings if f.severity == "error"]
    # control: the same output with a stale draft_vocab_size is caught
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "draft_vocab_size": len(OLD_IDS)}))
    assert not check_pair(out, target, engines[0]).ok


def test_remap_writes_a_config_sglang_and_specforge_build(tmp_path: Path) -> None:
    """A null target_hidden_size (as speculators writes it) breaks SGLang's and SpecForge's fc; remap drops it."""
    drafter = make_drafter(tmp_path / "d", VocabMapping.from_target_ids(OLD_IDS, VOCAB))
    config = json.loads((drafter / "config.json").read_text())
    (drafter / "config.json").write_text(json.dumps({**config, "target_hidden_size": None, "norm_output": None}))
    remap_drafter(drafter, VocabMapping.from_target_ids(NEW_IDS, VOCAB), tmp_path / "out", init="zeros")
    out = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "target_hidden_size" not in out and "norm_output" not in out and out["draft_vocab_size"] == 12


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_remap_mean_and_copied_rows_in_every_float_dtype(tmp_path: Path, dtype: torch.dtype) -> None:
    old_ids = list(range(0, 1200, 3))  # 400 rows: torch sums them in blocks, not one by one
    new_ids = sorted(old_ids[5:] + [1, 2, 4, 5, 7])
    drafter = make_drafter(tmp_path / "d", VocabMapping.from_target_ids(old_ids, 1200), dtype=dtype)
    result = remap_drafter(drafter, VocabMapping.from_target_ids(new_ids, 1200), tmp_path / "out", init="mean")
    old_head = load_file(str(drafter / "model.safetensors"))["lm_head.weight"]
    head = load_file(str(tmp_path / "out" / "model.safetensors"))["lm_head.weight"]
    assert head.dtype == dtype and result.new_tokens == [1, 2, 4, 5, 7]
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    for token in old_ids[5:]:
        assert head[new_ids.index(token)].view(bits).equal(old_head[old_ids.index(token)].view(bits))
    # torch's own mean, rounded to the stored dtype. The float32 sums differ in their last bits (torch
    # sums in blocks, draftlab in float64), which rounding to bf16/f16 absorbs but for rare ties
    expected = old_head.float().mean(0).to(dtype)
    for token in result.new_tokens:
        got = head[new_ids.index(token)]
        if dtype == torch.float32:
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-6 * float(old_head.abs().max()))
        else:
            steps = (got.view(bits).long() - expected.view(bits).long()).abs()
            assert steps.max() <= 1 and (steps == 0).float().mean() >= 0.95, steps


def test_remap_target_rows_of_another_dtype_are_rounded_as_torch_rounds(tmp_path: Path) -> None:
    drafter = make_drafter(tmp_path / "d", VocabMapping.from_target_ids(OLD_IDS, VOCAB))  # bf16
    target = make_target(tmp_path / "t", VOCAB, dtype=torch.float32)
    result = remap_drafter(drafter, VocabMapping.from_target_ids(NEW_IDS, VOCAB), tmp_path / "out", target=target)
    head = load_file(str(tmp_path / "out" / "model.safetensors"))["lm_head.weight"]
    target_head = load_file(str(target / "model.safetensors"))["lm_head.weight"]
    for token in result.new_tokens:
        assert head[NEW_IDS.index(token)].view(torch.int16).equal(target_head[token].to(torch.bfloat16).view(torch.int16))
