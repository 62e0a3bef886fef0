from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from draftlab.checkpoint.d2t import validate_d2t
from draftlab.errors import DraftlabError
from draftlab.vocab import VocabMapping, load_mapping

from .helpers import make_drafter


def encode(ids: list[int], vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    d2t = torch.tensor(ids) - torch.arange(len(ids))
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    return d2t, t2d


def test_encoding_is_offsets_and_mask() -> None:
    m = VocabMapping.from_target_ids([0, 3, 4, 9], 10)
    assert m.d2t.dtype == np.int64 and m.d2t.tolist() == [0, 2, 2, 6]
    assert m.t2d.dtype == np.bool_ and np.flatnonzero(m.t2d).tolist() == [0, 3, 4, 9]
    assert m.target_ids.tolist() == [0, 3, 4, 9]
    assert validate_d2t(m.d2t, m.t2d, 10) == []


@pytest.mark.parametrize("ids, vocab, t2d_ids, needle", [
    ([1, 5, 12], 10, [1, 5], "outside the target vocabulary [0, 10): draft 2 -> target 12"),
    ([1, 5, 5], 10, [1, 5], "already taken: draft 2 -> target 5"),
    ([4, 2, 7], 10, [2, 4, 7], "not increasing at 1 places"),
    ([1, 5, 7], 10, [1, 5, 8], "t2d is false at 1 target ids that d2t maps to, e.g. [7]"),
])
def test_mapping_refuses_invalid_buffers_naming_the_problem(ids: list[int], vocab: int, t2d_ids: list[int],
                                                            needle: str) -> None:
    d2t = torch.tensor(ids) - torch.arange(len(ids))
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[t2d_ids] = True
    with pytest.raises(DraftlabError, match="m.pt: invalid draft vocabulary: ") as err:
        VocabMapping.from_arrays(d2t, t2d, vocab, source="m.pt")
    assert needle in str(err.value)


def test_mapping_refuses_wrong_types_shapes_and_empty_tables() -> None:
    d2t, t2d = encode([1, 2], 5)
    for bad_d2t, bad_t2d, vocab, needle in [
        (d2t.float(), t2d, 5, "expected int64"),
        (d2t, t2d, 6, "t2d has 5 entries but the target vocabulary has 6"),
        (d2t, t2d.to(torch.int64) * 3, 5, "values other than true/false"),
        (torch.zeros(0, dtype=torch.int64), None, 5, "d2t is empty"),
    ]:
        with pytest.raises(DraftlabError, match="invalid draft vocabulary") as err:
            VocabMapping.from_arrays(bad_d2t, bad_t2d, vocab, source="m")
        assert needle in str(err.value)


def test_mapping_files_round_trip_in_both_formats(tmp_path: Path) -> None:
    m = VocabMapping.from_target_ids([2, 3, 7, 11], 16)
    for name in ("m.safetensors", "m.pt"):
        fmt = "pt" if name.endswith(".pt") else "safetensors"
        back = VocabMapping.from_file(m.save(tmp_path / name, fmt))
        assert np.array_equal(back.d2t, m.d2t) and np.array_equal(back.t2d, m.t2d) and back.vocab_size == 16
    # SpecForge's own torch.save dict, as generate_vocab_mapping_file writes it
    torch.save({"d2t": torch.from_numpy(m.d2t), "t2d": torch.from_numpy(m.t2d)}, tmp_path / "specforge.pt")
    assert load_mapping(tmp_path / "specforge.pt").target_ids.tolist() == [2, 3, 7, 11]


def test_bad_mapping_files_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "junk.pt").write_bytes(b"not a pickle")
    with pytest.raises(DraftlabError, match="weights-only"):
        VocabMapping.from_file(tmp_path / "junk.pt")
    save_file({"t2d": torch.ones(4, dtype=torch.bool)}, str(tmp_path / "no_d2t.safetensors"))
    with pytest.raises(DraftlabError, match="has no 'd2t'"):
        VocabMapping.from_file(tmp_path / "no_d2t.safetensors")
    d2t, t2d = encode([3, 1], 5)
    save_file({"d2t": d2t, "t2d": t2d}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(DraftlabError, match="bad.safetensors: invalid draft vocabulary: d2t target ids are not"):
        VocabMapping.from_file(tmp_path / "bad.safetensors")


@pytest.mark.parametrize("layout", ["specforge", "speculators"])
def test_from_drafter_reads_both_layouts(tmp_path: Path, layout: str) -> None:
    m = VocabMapping.from_target_ids([0, 4, 5, 9, 30], 40)
    folder = make_drafter(tmp_path / layout, m, layout=layout)
    for path in (folder, folder / "model.safetensors"):
        got = load_mapping(path)
        assert got.target_ids.tolist() == [0, 4, 5, 9, 30] and got.vocab_size == 40


def test_from_drafter_refuses_sizes_that_disagree(tmp_path: Path) -> None:
    folder = make_drafter(tmp_path / "d", VocabMapping.from_target_ids([1, 2, 3], 12))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "draft_vocab_size": 4}))
    with pytest.raises(DraftlabError, match="lm_head.weight has 3 rows but config draft_vocab_size is 4"):
        VocabMapping.from_drafter(folder)
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 20}))
    with pytest.raises(DraftlabError, match="t2d has 12 entries but the target vocabulary has 20"):
        VocabMapping.from_drafter(folder)
