"""``generate`` and ``draftlab generate`` on the trained toy pair (fp32, cpu)."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from draftlab.cli import main
from draftlab.decode.generate import generate
from draftlab.models.pair import deployment_for

PROMPTS = [b"def __init__(self", b"import os\nimport sys\n", b"    return self._", b"for i in range(len("]
CONFIGS = [(3, 1, 4), (2, 2, 4), (4, 4, 8), (5, 4, 8)]
NEW = 32


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(p)}) + "\n" for p in PROMPTS))
    return path


@pytest.fixture(scope="module")
def hf_greedy(toy_pair):
    """The target's own greedy continuation: full forward each step, no cache, stop after EOS."""
    model = AutoModelForCausalLM.from_pretrained(toy_pair.target_dir, dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id
    out = []
    with torch.inference_mode():
        for prompt in PROMPTS:
            seq = list(prompt)
            for _ in range(NEW):
                seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
                if seq[-1] == eos:
                    break
            out.append(seq[len(prompt):])
    return out


@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(map(str, c)) for c in CONFIGS])
def test_greedy_speculative_equals_target_greedy_with_nontrivial_acceptance(toy_pair, prompts_file, hf_greedy, cfg):
    steps, topk, n = cfg
    result = generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts_file, steps=steps, topk=topk,
                      num_draft_tokens=n, max_new_tokens=NEW)
    assert [r.output_ids for r in result.results] == hf_greedy
    lengths = [a for r in result.results for a in r.accept_lengths]
    assert all(1 <= a <= steps + 1 for a in lengths)
    assert result.mean_accept_length == pytest.approx(sum(lengths) / len(lengths))
    assert result.mean_accept_length > 1.2


@pytest.mark.parametrize("batch_size", [1, 3])
def test_no_draft_equals_target_greedy(toy_pair, prompts_file, hf_greedy, batch_size):
    """Batch 1 runs the batch-1 decoder, --batch-size the plain batched loop (groups of 3 and 1)."""
    result = generate(toy_pair.target_dir, None, prompts_file, no_draft=True, max_new_tokens=NEW,
                      batch_size=batch_size)
    assert [r.output_ids for r in result.results] == hf_greedy
    assert all(r.accept_lengths == [1] * (len(r.output_ids) - 1) for r in result.results)
    free = generate(toy_pair.target_dir, None, prompts_file, no_draft=True, max_new_tokens=NEW,
                    batch_size=batch_size, ignore_eos=True)
    assert all(len(r.output_ids) == NEW and r.output_ids[:len(h)] == h for r, h in zip(free.results, hf_greedy))


def test_no_draft_compiles_only_when_its_steps_pay_for_it(toy_pair, prompts_file, hf_greedy, monkeypatch):
    """torch.compile's set-up costs seconds: plain decoding asks for it by the steps the groups will take
    in all (here 2 groups x NEW), and the batched target gets that answer."""
    import draftlab.decode.generate as generate_module
    from draftlab.models.target_batch import BatchTarget

    asked: list[int] = []
    monkeypatch.setattr(generate_module, "compile_pays", lambda steps, device: not asked.append(steps))
    built: list[bool] = []
    original = BatchTarget.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        built.append(self.compile)
        self.compile = False  # recorded; this test's decode need not compile

    monkeypatch.setattr(BatchTarget, "__init__", recording)
    result = generate(toy_pair.target_dir, None, prompts_file, no_draft=True, max_new_tokens=NEW, batch_size=3)
    assert asked == [2 * NEW] and built == [True, True]  # the group of three, then the last one alone
    assert [r.output_ids for r in result.results] == hf_greedy
    assert result.config["compile"] is True  # what the document says the run did


def test_json_contract(toy_pair, prompts_file, capsys):
    code = main(["generate", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                 "--prompts", str(prompts_file), "--steps", "3", "--topk", "1", "--num-draft-tokens", "4",
                 "--max-new-tokens", "9", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"config", "mean_accept_length", "tokens_per_second", "results", "row_busy_fraction",
                        "provenance"}
    assert doc["provenance"]["command"].startswith("draftlab generate --target ")
    assert doc["row_busy_fraction"] == 1.0  # one prompt at a time
    assert doc["config"]["steps"] == 3 and doc["config"]["num_draft_tokens"] == 4
    assert isinstance(doc["mean_accept_length"], float) and doc["tokens_per_second"] > 0
    assert [r["prompt_index"] for r in doc["results"]] == list(range(len(PROMPTS)))
    for r in doc["results"]:
        assert set(r) == {"prompt_index", "output_ids", "accept_lengths", "num_cycles"}
        assert r["num_cycles"] == len(r["accept_lengths"])
        assert len(r["output_ids"]) <= 9
        # the cycles committed at least what is out beyond the prefill token (more if trimmed)
        assert sum(r["accept_lengths"]) >= len(r["output_ids"]) - 1
    total = sum(sum(r["accept_lengths"]) for r in doc["results"])
    cycles = sum(r["num_cycles"] for r in doc["results"])
    assert doc["mean_accept_length"] == pytest.approx(total / cycles)


def test_steps_and_topk_one_alone_run_sglangs_chain_recorded_as_rewritten(toy_pair, prompts_file, capsys):
    """SGLang completes --steps 3 --topk 1 with 4 draft tokens (a warning): the same run as 3/1/4, and the
    JSON's flags_source says so."""
    docs = []
    for ndt in ([], ["--num-draft-tokens", "4"]):
        code = main(["generate", "--target", str(toy_pair.target_dir), "--drafter", str(toy_pair.drafter_dir),
                     "--prompts", str(prompts_file), "--steps", "3", "--topk", "1", *ndt, "--max-new-tokens", "9",
                     "--json"])
        assert code == 0
        docs.append(json.loads(capsys.readouterr().out))
    partial, explicit = docs
    assert partial["config"]["num_draft_tokens"] == 4 and partial["config"]["flags_source"].startswith("rewritten")
    assert explicit["config"]["flags_source"] == "explicit"
    assert partial["results"] == explicit["results"]


def test_text_and_chat_rows_use_the_target_tokenizer(toy_pair, tmp_path):
    """A ``prompt`` row is the target tokenizer's encoding of the text and a ``messages`` row its chat
    template with a generation prompt, so both decode exactly like the same ids given as ``input_ids``."""
    text = "def f(x):"
    chat = [{"role": "user", "content": "hi"}]
    tokenizer = AutoTokenizer.from_pretrained(toy_pair.target_dir)
    text_ids = tokenizer.encode(text)
    chat_ids = list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=False))
    assert text_ids and chat_ids and all(isinstance(i, int) for i in text_ids + chat_ids)

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": text}) + "\n" + json.dumps({"messages": chat}) + "\n")
    ids = tmp_path / "ids.jsonl"
    ids.write_text(json.dumps({"input_ids": text_ids}) + "\n" + json.dumps({"input_ids": chat_ids}) + "\n")
    got, want = (generate(toy_pair.target_dir, toy_pair.drafter_dir, path, steps=2, topk=1, num_draft_tokens=3,
                          max_new_tokens=8) for path in (rows, ids))
    assert [len(r.output_ids) for r in got.results] == [8, 8]
    assert [r.output_ids for r in got.results] == [r.output_ids for r in want.results]
    assert [r.accept_lengths for r in got.results] == [r.accept_lengths for r in want.results]


def test_vllm_convention_reads_the_same_layers_on_the_toy_drafter(toy_pair, prompts_file):
    """The toy drafter names the same layers in both engines' fields, so both runs must agree."""
    runs = [generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts_file, steps=2, topk=2, num_draft_tokens=4,
                     max_new_tokens=8, deployment=deployment_for(toy_pair.target_dir, toy_pair.drafter_dir, engine))
            for engine in ("sglang", "vllm")]
    assert runs[0].config["aux_layers"] == runs[1].config["aux_layers"] == [0, 1, 2]
    assert [r.output_ids for r in runs[0].results] == [r.output_ids for r in runs[1].results]
    # Greedy verification makes output_ids the target's alone, whatever the drafter proposes; only the
    # acceptance shows whether the drafter saw the same features in both runs.
    assert [r.accept_lengths for r in runs[0].results] == [r.accept_lengths for r in runs[1].results]
    assert all(r.accept_lengths for r in runs[0].results)
    assert runs[0].mean_accept_length > 1.5  # the drafter really drafts: most cycles accept a draft token


@pytest.mark.parametrize("cfg", [(3, 1, 4), (2, 2, 4)], ids=["chain", "tree"])
def test_sampling_is_reproducible_by_seed(toy_pair, prompts_file, cfg):
    steps, topk, n = cfg

    def run(seed):
        result = generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts_file, steps=steps, topk=topk,
                          num_draft_tokens=n, max_new_tokens=16, temperature=1.0, seed=seed)
        assert all(1 <= a <= steps + 1 for r in result.results for a in r.accept_lengths)
        return [r.output_ids for r in result.results]

    first = run(1)
    assert run(1) == first
    assert run(2) != first
