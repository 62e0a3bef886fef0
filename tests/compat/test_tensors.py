"""Rules that read tensor headers and the d2t/t2d buffers."""

from __future__ import annotations

import json
from pathlib import Path

from builders import make_pair

from draftlab.checkpoint.configs import DrafterConfig
from draftlab.checkpoint.synth import drafter_specs, vocab_mapping, write_safetensors
from draftlab.compat import check_pair


def rewrite_weights(drafter: Path, *, shapes: dict | None = None, drop: tuple = (), d2t=None, t2d=None) -> None:
    """Rewrite the drafter's weights with some shapes changed, tensors dropped or buffers replaced."""
    d = DrafterConfig.from_dict(json.loads((drafter / "config.json").read_text()))
    specs = drafter_specs(d)
    for name, shape in (shapes or {}).items():
        specs[name] = (specs[name][0], shape)
    ids = range(0, 4 * d.draft_vocab_size, 4)
    good_d2t, good_t2d = vocab_mapping(ids, d.vocab_size)
    values = {"d2t": good_d2t if d2t is None else d2t, "t2d": good_t2d if t2d is None else t2d}
    specs["d2t"] = ("I64", (len(values["d2t"]),))
    specs["t2d"] = ("BOOL", (len(values["t2d"]),))
    for name in drop:
        specs.pop(name)
        values.pop(name, None)
    write_safetensors(drafter / "model.safetensors", specs, values=values)


def findings(drafter, target, code, engine="sglang"):
    return [f for f in check_pair(drafter, target, engine).findings if f.code == code]


def test_clean_rewrite_has_no_findings(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    rewrite_weights(drafter)
    assert check_pair(drafter, target).findings == []


def test_fc_width(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    rewrite_weights(drafter, shapes={"fc.weight": (64, 3 * 48)})
    [f] = findings(drafter, target, "fc-width")
    assert f.severity == "error" and f.field == "fc.weight" and "[64, 192]" in f.message


def test_qkv_width(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["qwen3_moe"])
    rewrite_weights(drafter, shapes={"midlayer.self_attn.k_proj.weight": (32, 64)})
    [f] = findings(drafter, target, "qkv-width")
    assert f.field == "midlayer.self_attn.k_proj.weight" and "2 x 64 = 128" in f.message


def test_lm_head_rows(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    rewrite_weights(drafter, shapes={"lm_head.weight": (100, 64)})
    assert findings(drafter, target, "lm-head-rows")


def test_missing_tensors(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    rewrite_weights(drafter, drop=("fc.weight", "lm_head.weight"))
    assert {f.field for f in findings(drafter, target, "missing-tensor")} == {"fc.weight", "lm_head.weight"}


def test_missing_d2t_with_pruned_vocab(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["deepseek_v3"])
    rewrite_weights(drafter, drop=("d2t", "t2d"))
    [f] = findings(drafter, target, "missing-d2t")
    assert f.severity == "error" and "first 128 target ids" in f.message


def test_invalid_d2t(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    d2t, t2d = vocab_mapping(range(0, 512, 4), 512)
    d2t[5] = 10_000  # out of range
    d2t[7] = d2t[6] - 1  # maps onto the same target id as draft 6
    rewrite_weights(drafter, d2t=d2t, t2d=t2d)
    messages = " ".join(f.message for f in findings(drafter, target, "d2t-invalid"))
    assert "outside the target vocabulary" in messages and "already taken" in messages


def test_d2t_wrong_length(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    d2t, t2d = vocab_mapping(range(0, 400, 4), 512)  # 100 entries for a draft vocab of 128
    rewrite_weights(drafter, d2t=d2t, t2d=t2d)
    [f] = findings(drafter, target, "d2t-invalid")
    assert "100 entries" in f.message


def test_t2d_disagreeing_with_d2t(tmp_path, target_configs):
    drafter, target = make_pair(tmp_path, target_configs["llama"])
    d2t, t2d = vocab_mapping(range(0, 512, 4), 512)
    t2d[0], t2d[1] = 0, 1
    rewrite_weights(drafter, d2t=d2t, t2d=t2d)
    found = findings(drafter, target, "t2d-mismatch")
    assert {f.severity for f in found} == {"warning"} and len(found) == 2
    assert not findings(drafter, target, "d2t-invalid")
