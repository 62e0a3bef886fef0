from __future__ import annotations

import json
from pathlib import Path

import pytest

from draftlab.cli import main
from draftlab.errors import DraftlabError
from draftlab.vocab import TokenCounts, VocabMapping, compare_mappings, coverage

from .conftest import VOCAB
from .helpers import make_drafter


def write_counts(path: Path, counts: dict[int, int], vocab: int) -> Path:
    path.write_text(json.dumps({"vocab_size": vocab, "num_tokens": sum(counts.values()),
                                "counts": {str(k): v for k, v in counts.items()}}))
    return path


def test_coverage_is_the_share_of_counted_tokens_inside() -> None:
    mapping = VocabMapping.from_target_ids([1, 2, 5], 10)
    counts = TokenCounts(10, {1: 10, 2: 5, 3: 20, 7: 1, 8: 20, 5: 4})
    result = coverage(mapping, counts, top=2)
    assert result.num_tokens == 60 and result.covered_tokens == 19
    assert result.coverage == pytest.approx(19 / 60)
    assert result.distinct_missing == 3
    assert [(m.token_id, m.count) for m in result.missing] == [(3, 20), (8, 20)]


def test_coverage_refuses_counts_of_another_vocabulary() -> None:
    with pytest.raises(DraftlabError, match="counts are for a 12-token vocabulary but"):
        coverage(VocabMapping.from_target_ids([1], 10), TokenCounts(12, {1: 3}))


def test_compare_figures() -> None:
    a = VocabMapping.from_target_ids([0, 1, 2, 3, 4], 10)
    b = VocabMapping.from_target_ids([0, 2, 3, 4, 9], 10)
    r = compare_mappings(a, b, TokenCounts(10, {1: 6, 9: 2, 0: 2}))
    assert (r.a_size, r.b_size, r.shared_tokens) == (5, 5, 4)
    assert r.jaccard == pytest.approx(4 / 6)
    # d2t a = [0,0,0,0,0]; b = [0,1,1,1,5]: positions 1..4 differ
    assert r.differing_d2t_entries == 4
    assert (r.only_in_a, r.only_in_b) == ([1], [9])
    assert (r.coverage_a, r.coverage_b) == (pytest.approx(0.8), pytest.approx(0.4))
    shorter = VocabMapping.from_target_ids([0, 1, 2], 10)
    assert compare_mappings(a, shorter).differing_d2t_entries == 2  # positions 3 and 4 exist only in A
    with pytest.raises(DraftlabError, match="different targets"):
        compare_mappings(a, VocabMapping.from_target_ids([0], 11))


def test_cli_coverage_and_compare_on_drafters(tmp_path: Path, target_chat: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    a = make_drafter(tmp_path / "a", VocabMapping.from_target_ids(list(range(40, 104)), VOCAB))
    b_map = VocabMapping.from_target_ids(list(range(60, 124)), VOCAB)
    b_map.save(tmp_path / "b.safetensors")
    counts = write_counts(tmp_path / "c.json", {45: 30, 110: 50, 70: 20, 130: 7}, VOCAB)

    assert main(["vocab", "coverage", str(a), "--counts", str(counts), "--tokenizer", str(target_chat),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["coverage"] == pytest.approx(50 / 107) and doc["num_tokens"] == 107
    assert [m["token_id"] for m in doc["missing"]] == [110, 130]
    assert all(isinstance(m["text"], str) and m["text"] for m in doc["missing"])
    assert set(doc["missing"][0]) == {"token_id", "count", "text"}

    assert main(["vocab", "compare", str(a), str(tmp_path / "b.safetensors"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"a_size", "b_size", "shared_tokens", "jaccard", "differing_d2t_entries",
                        "only_in_a", "only_in_b", "provenance"}
    assert doc["shared_tokens"] == 44 and doc["differing_d2t_entries"] == 64
    assert main(["vocab", "compare", str(a), str(tmp_path / "b.safetensors"), "--counts", str(counts),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["coverage_a"] == pytest.approx(50 / 107) and doc["coverage_b"] == pytest.approx(70 / 107)

    assert main(["vocab", "compare", str(a), str(tmp_path / "b.safetensors"), "--counts", str(counts)]) == 0
    assert "differing d2t entries" in capsys.readouterr().out


def test_cli_coverage_refuses_mismatched_inputs(tmp_path: Path, tokenizers_root: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    mapping = VocabMapping.from_target_ids([1, 2], 100)
    mapping.save(tmp_path / "m.safetensors")
    counts = write_counts(tmp_path / "c.json", {1: 3}, 100)
    # a 300-token tokenizer cannot decode for a 100-token vocabulary
    assert main(["vocab", "coverage", str(tmp_path / "m.safetensors"), "--counts", str(counts),
                 "--tokenizer", str(tokenizers_root / "plain")]) == 2
    assert "tokenizer has 300 tokens but the vocabulary has 100" in capsys.readouterr().err
    other = write_counts(tmp_path / "o.json", {1: 3}, 120)
    assert main(["vocab", "coverage", str(tmp_path / "m.safetensors"), "--counts", str(other)]) == 2
    assert "counts are for a 120-token vocabulary" in capsys.readouterr().err


def test_compare_refuses_a_target_instead_of_reading_it_as_a_full_vocabulary(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from .helpers import make_target

    drafter = make_drafter(tmp_path / "drafter", VocabMapping.from_target_ids(list(range(0, 200, 2)), VOCAB))
    target = make_target(tmp_path / "target", VOCAB)
    assert main(["vocab", "compare", str(drafter), str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip() == (
        f"draftlab: error: {target}: is a model (LlamaForCausalLM), not an EAGLE-3 drafter: it holds no draft "
        "vocabulary mapping (d2t/t2d); give a drafter folder or a mapping file (.safetensors / .pt)")
