from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from draftlab.cli import main
from draftlab.vocab import TokenCounts, VocabMapping, build_mapping, select_draft_tokens


def specforge_oracle(token_dict: Counter, draft_vocab_size: int, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """SpecForge's process_token_dict_to_mappings rule, restated plainly with a Counter."""
    token_dict = Counter(token_dict)
    if len(token_dict) < draft_vocab_size:
        for token in set(range(draft_vocab_size)) - set(token_dict.keys()):
            token_dict[token] = 0
            if len(token_dict) >= draft_vocab_size:
                break
    used = sorted(token for token, _ in token_dict.most_common(draft_vocab_size))
    d2t = torch.tensor([used[i] - i for i in range(len(used))])
    t2d = torch.tensor([i in used for i in range(vocab_size)])
    return d2t, t2d


def built(counts: dict[int, int], size: int, vocab: int) -> VocabMapping:
    return build_mapping(TokenCounts(vocab, counts), size)


TRICKY = [
    ({5: 3, 2: 3, 9: 3, 1: 1}, 2, 12),  # a three-way tie across the cut: insertion order decides
    ({9: 3, 5: 3, 2: 3, 1: 1}, 2, 12),  # same counts, other order, other answer
    ({1: 4, 3: 2}, 5, 8),  # padding with ids already among the pad ids
    ({100: 5, 7: 1, 200: 2}, 6, 256),  # seen ids outside range(N): only some pad ids are needed
    ({**{i: 1 for i in range(100) if not 60 <= i < 70}, **{150 + i: 2 for i in range(5)}}, 100, 300),
    ({3: 0, 4: 0, 8: 1}, 4, 10),  # zero counts present in the file count as seen keys
    ({0: 7}, 1, 3),
]


@pytest.mark.parametrize("counts, size, vocab", TRICKY)
def test_build_matches_specforge_rule_on_tricky_counts(counts: dict[int, int], size: int, vocab: int) -> None:
    d2t, t2d = specforge_oracle(Counter(counts), size, vocab)
    m = built(counts, size, vocab)
    assert m.d2t.dtype == np.int64 and torch.equal(torch.from_numpy(m.d2t), d2t)
    assert m.t2d.dtype == np.bool_ and torch.equal(torch.from_numpy(m.t2d), t2d)


def test_padding_follows_set_order_not_ascending_order() -> None:
    counts, size, vocab = TRICKY[4]
    ids = built(counts, size, vocab).target_ids.tolist()
    # 95 ids seen, 5 pads needed from {60..69}; SpecForge's set iteration yields 64..68 first
    assert [i for i in ids if 60 <= i < 70] == [64, 65, 66, 67, 68]


def test_build_matches_specforge_rule_on_random_counts() -> None:
    rng = random.Random(7)
    for _ in range(60):
        vocab = rng.randint(20, 400)
        size = rng.randint(1, vocab)
        ids = rng.sample(range(vocab), rng.randint(0, vocab))
        counts = {i: rng.choice([0, 1, 1, 2, 3, rng.randint(1, 50)]) for i in ids}
        d2t, t2d = specforge_oracle(Counter(counts), size, vocab)
        m = built(counts, size, vocab)
        assert torch.equal(torch.from_numpy(m.d2t), d2t) and torch.equal(torch.from_numpy(m.t2d), t2d), (counts, size, vocab)


def test_selection_is_top_counts() -> None:
    assert select_draft_tokens({7: 1, 3: 10, 5: 4, 9: 2}, 2) == [3, 5]


def write_counts(path: Path, counts: dict[int, int], vocab: int) -> Path:
    path.write_text(json.dumps({"vocab_size": vocab, "num_tokens": sum(counts.values()),
                                "counts": {str(k): v for k, v in counts.items()}}))
    return path


def test_cli_build_writes_the_oracle_mapping_in_both_formats(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    counts = {10: 5, 3: 5, 4: 1, 30: 9}
    path = write_counts(tmp_path / "c.json", counts, 40)
    d2t, t2d = specforge_oracle(Counter(counts), 6, 40)
    assert main(["vocab", "build", "--counts", str(path), "--size", "6", "-o", str(tmp_path / "m.safetensors"),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["draft_size"] == 6 and doc["padded"] == 2 and doc["seen_tokens"] == 4 and doc["coverage"] == 1.0
    assert np.array_equal(VocabMapping.from_file(tmp_path / "m.safetensors").d2t, d2t.numpy())
    written = load_file(str(tmp_path / "m.safetensors"))  # the safetensors library reads draftlab's file
    assert torch.equal(written["d2t"], d2t) and torch.equal(written["t2d"], t2d)
    assert main(["vocab", "build", "--counts", str(path), "--size", "6", "-o", str(tmp_path / "m.pt")]) == 0
    raw = torch.load(tmp_path / "m.pt", weights_only=True)
    assert set(raw) == {"d2t", "t2d"} and torch.equal(raw["d2t"], d2t) and torch.equal(raw["t2d"], t2d)


def test_cli_build_vocab_size_override_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = write_counts(tmp_path / "c.json", {1: 3, 35: 2}, 40)
    assert main(["vocab", "build", "--counts", str(path), "--size", "4", "--vocab-size", "64",
                 "-o", str(tmp_path / "m.safetensors")]) == 0
    assert VocabMapping.from_file(tmp_path / "m.safetensors").vocab_size == 64
    capsys.readouterr()
    for args, needle in [
        (["--size", "4", "--vocab-size", "30"], "holds token id 35, outside a 30-token vocabulary"),
        (["--size", "41"], "--size 41 is larger than the 40-token target vocabulary"),
    ]:
        out = tmp_path / "bad.safetensors"
        assert main(["vocab", "build", "--counts", str(path), *args, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1
        assert not out.exists()
    (tmp_path / "broken.json").write_text('{"vocab_size": 40, "counts": {"1": -2}}')
    assert main(["vocab", "build", "--counts", str(tmp_path / "broken.json"), "--size", "2",
                 "-o", str(tmp_path / "x.safetensors")]) == 2
    assert "counts['1'] must be a non-negative integer" in capsys.readouterr().err
