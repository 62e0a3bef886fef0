"""inspect: targets of three families, drafters of both layouts, real-size shapes over sparse files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import SEEN_AUX, make_pair

from draftlab.checkpoint.synth import write_drafter, write_target
from draftlab.cli import main
from draftlab.compat.summary import inspect_checkpoint

REFERENCE = Path("/work/shared/reference/configs")


@pytest.mark.parametrize(("family", "attention", "experts"), [("llama", "GQA", None), ("qwen3_moe", "GQA", 4),
                                                             ("deepseek_v3", "MLA", 4)])
def test_inspect_targets(tmp_path, target_configs, family, attention, experts, capsys):
    target = write_target(tmp_path / "t", target_configs[family], shards=2)
    assert main(["inspect", str(target), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "target" and doc["num_layers"] == 8 and doc["hidden_size"] == 64
    assert doc["vocab_size"] == 512 and doc["max_position_embeddings"] == 4096 and doc["dtype"] == "bfloat16"
    assert doc["attention"] == attention and (doc["moe"] or {}).get("num_experts") == experts
    assert doc["num_parameters"] > 2 * 512 * 64 and doc["num_tensors"] > 8 * 5


def test_inspect_reads_nested_text_config(tmp_path, target_configs):
    wrapped = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
               "text_config": target_configs["deepseek_v3"]}
    write_target(tmp_path / "t", target_configs["deepseek_v3"])
    (tmp_path / "t" / "config.json").write_text(json.dumps(wrapped))
    result = inspect_checkpoint(tmp_path / "t")
    assert result.kind == "target" and result.architecture == "DeepseekV3ForCausalLM" and result.attention == "MLA"


def test_inspect_drafter_both_engines(tmp_path, target_configs, capsys):
    drafter, _ = make_pair(tmp_path, target_configs["llama"], layer_prefix="layers.0.")
    assert main(["inspect", str(drafter), "--json", "--engine", "vllm"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "drafter" and doc["layout"] == "specforge" and doc["weight_naming"] == "layers.0"
    assert doc["aux_layers"] == SEEN_AUX and doc["aux_source"] == "top-level"
    assert (doc["hidden_size"], doc["target_hidden_size"], doc["vocab_size"], doc["draft_vocab_size"]) == (64, 64, 512, 128)
    assert doc["has_d2t"] and doc["has_t2d"] and doc["d2t_valid"] and doc["num_layers"] == 1
    assert doc["num_parameters"] == sum([
        64 * 192,  # fc: 3 x target hidden -> hidden
        64 * 128 + 2 * 32 * 128 + 64 * 64,  # q (4 heads), k and v (2 kv heads) take 2 x hidden; o
        3 * 128 * 64, 4 * 64, 128 * 64])  # mlp, the four norms, lm_head over the draft vocab


def test_default_aux_layers_need_the_target_depth(tmp_path, target_configs):
    from builders import DROP

    drafter, _ = make_pair(tmp_path, target_configs["llama"], eagle_config=DROP,
                           eagle_aux_hidden_state_layer_ids=DROP)
    assert inspect_checkpoint(drafter).aux_layers is None
    assert inspect_checkpoint(drafter, num_target_layers=32).aux_layers == [1, 15, 28]


def test_hf_cache_symlinked_shards_are_accepted(tmp_path, target_configs):
    real = write_target(tmp_path / "blobs", target_configs["llama"], shards=2)
    snap = tmp_path / "snapshots" / "abc"
    snap.mkdir(parents=True)
    for f in real.iterdir():
        (snap / f.name).symlink_to(f)
    assert inspect_checkpoint(snap).num_tensors == inspect_checkpoint(real).num_tensors


def test_pytorch_bin_drafter(tmp_path, target_configs):
    import torch

    drafter, _ = make_pair(tmp_path, target_configs["llama"])
    from draftlab.checkpoint import open_checkpoint

    state = open_checkpoint(drafter).load()
    torch.save(state, drafter / "pytorch_model.bin")
    (drafter / "model.safetensors").unlink()
    result = inspect_checkpoint(drafter)
    assert result.format == "pytorch" and result.d2t_valid and result.num_tensors == len(state)


def test_real_size_kimi_drafter_over_sparse_file(tmp_path):
    config = json.loads((REFERENCE / "aq-medai-kimi-k2-instruct-eagle3.config.json").read_text())
    drafter = write_drafter(tmp_path / "kimi", config, sparse=True)
    result = inspect_checkpoint(drafter, num_target_layers=61)
    assert result.aux_layers == [2, 30, 58] and result.aux_source == "eagle_config"
    assert 1.18e9 < result.num_parameters < 1.2e9  # ~1.19B without the embedding
    assert result.size_on_disk > 2e9 and result.d2t_valid


def test_inspect_json_names_the_variant_attention_and_what_draftlab_cannot_compute(tmp_path, target_configs, capsys):
    from builders import k2_mla_pair, with_tensors

    drafter, _ = k2_mla_pair(tmp_path / "k2", fc_norm=True, norm_output=True)
    assert main(["inspect", str(drafter), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["variant"], doc["attention"], doc["fc_norm"], doc["norm_output"], doc["norm_before_fc"]) == \
        ("eagle3.1-mla", "MLA", True, True, False)
    assert (doc["q_lora_rank"], doc["kv_lora_rank"], doc["qk_nope_head_dim"], doc["qk_rope_head_dim"],
            doc["v_head_dim"]) == (1536, 512, 128, 64, 128)
    assert doc["unsupported"] == [] and doc["unknown_keys"] == [] and doc["engine_version"] == "0.5.23"

    plain, _ = make_pair(tmp_path / "moe", target_configs["llama"], my_note="trained on chat", use_fancy_norm=True)
    with_tensors(plain, {"midlayer.mlp.experts.0.gate_proj.weight": ("BF16", (32, 64))})
    assert main(["inspect", str(plain), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["variant"], doc["attention"], doc["kv_lora_rank"]) == ("eagle3", "GQA", None)
    assert {u["field"] for u in doc["unsupported"]} == {"midlayer.mlp.experts.0.gate_proj.weight", "use_fancy_norm"}
    assert all(u["message"] for u in doc["unsupported"]) and doc["unknown_keys"] == ["my_note", "use_fancy_norm"]
    assert main(["inspect", str(plain)]) == 0
    shown = capsys.readouterr().out
    assert "eagle3" in shown and "unsupported" in shown and "my_note" in shown


def test_mla_drafter_ids_are_read_for_a_deepseek_kimi_target(tmp_path, capsys):
    """An MLA drafter serves DeepSeek/Kimi targets only, so inspect reads its SGLang ids by their rule
    (first id not 1: verbatim, inputs of layers) without being told; the given target agrees."""
    from builders import k2_mla_pair

    drafter, target = k2_mla_pair(tmp_path)  # eagle_config ids [2, 30, 58]
    alone = inspect_checkpoint(drafter)
    assert alone.aux_layers == [1, 29, 57] and alone.aux_family_from == "drafter" and not alone.aux_other_readings
    given = inspect_checkpoint(drafter, target=target)
    assert given.aux_layers == [1, 29, 57] and (given.aux_family, given.aux_family_from) == ("deepseek", "target")


def test_llama_drafter_for_a_deepseek_target_says_the_reading_depends_on_the_target(tmp_path, target_configs,
                                                                                  capsys):
    """A Llama-architecture drafter can serve a Kimi target (AQ-MedAI's): without --target inspect says
    which family it assumed and what a DeepSeek/Kimi target's SGLang would capture; with it, that."""
    drafter, target = make_pair(tmp_path, target_configs["deepseek_v3"],
                                eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 6]})
    alone = inspect_checkpoint(drafter)
    assert alone.aux_layers == [2, 4, 6] and alone.aux_family_from == "assumed"
    assert alone.aux_other_readings == {"deepseek": [1, 3, 5]}
    assert main(["inspect", str(drafter)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Llama-like target" in out and "deepseek target: [1, 3, 5]" in out and "--target" in out
    assert main(["inspect", str(drafter), "--target", str(target), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["aux_layers"] == [1, 3, 5] and doc["aux_family"] == "deepseek" and doc["aux_other_readings"] == {}
    assert main(["inspect", str(drafter), "--target", str(drafter)]) == 2  # a drafter is no target
    assert "--target must be the target model" in capsys.readouterr().err
