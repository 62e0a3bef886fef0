"""MLA drafters on the toy DeepSeek-V3 target, exactly: ``generate``'s per-cycle accept lengths equal a
plain greedy speculative loop over the independent reference drafter (:mod:`mla_reference`) and the
target's uncached HF forward; ``probe`` equals ``generate``; and the EAGLE-3.1 flags are computed (the
same weights with a flag dropped accept differently)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from mla_reference import MlaReference
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from draftlab.compat import check_pair
from draftlab.decode.generate import generate
from draftlab.models import target as target_module
from draftlab.models.drafter_weights import canonical_names
from draftlab.models.pair import load_pair
from draftlab.probe.probe import probe
from draftlab.toy.mla import AUX_LAYERS, cached_mla_toy

TEXTS = ["def __init__(self", "import os\nimport sys\n", "    return self._", "for i in range(len(",
         "class Foo(object):\n    "]
CONFIGS = [(3, 1, 4), (3, 2, 6)]
NEW = 32
KINDS = ["mla", "mla-eagle3.1"]


@pytest.fixture(scope="module")
def toy():
    return cached_mla_toy()


def _drafter_dir(toy, kind: str) -> Path:
    return toy.drafter_dir if kind == "mla" else toy.eagle31_dir


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("p") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in TEXTS))
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_the_toy_mla_drafters_check_clean_in_both_engines(toy, kind):
    """generate runs check first: an MLA drafter (and its EAGLE-3.1 form) is one both engines serve."""
    for engine in ("sglang", "vllm"):
        result = check_pair(_drafter_dir(toy, kind), toy.target_dir, engine)
        assert result.ok, [(f.code, f.message) for f in result.findings if f.severity == "error"]


# --- the reference: greedy speculative decoding written plainly, no caches -----------------------

class _Reference:
    """SGLang's tree (DESIGN.md) drafted by :class:`MlaReference`, verified by the target's uncached
    forward: each draft node is the reference drafter over the committed rows plus its ancestors."""

    def __init__(self, target, drafter_dir: Path) -> None:
        self.target = target
        config = json.loads((drafter_dir / "config.json").read_text())
        t = canonical_names(load_file(str(drafter_dir / "model.safetensors")), drafter_dir)
        t["embed_tokens.weight"] = target.get_input_embeddings().weight.detach()
        self.d2t = t.pop("d2t")
        self.drafter = MlaReference(t, config)
        self.eos = target.generation_config.eos_token_id

    def _target(self, seq: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [L, V] and aux features [L, 3T] (outputs of the AUX_LAYERS) of a sequence."""
        out = self.target(torch.tensor([seq]), output_hidden_states=True)
        return out.logits[0], torch.cat([out.hidden_states[k + 1][0] for k in AUX_LAYERS], -1)

    def _node(self, seq: list[int], feats: torch.Tensor, path: list[tuple[int, torch.Tensor]]
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Drafter logits and next hidden after the committed rows (row j: token seq[j+1], feature j)
        and ``path`` (drafted token, its input hidden), one position each, causal."""
        ids = torch.tensor(seq[1:] + [tok for tok, _ in path])
        rows = list(feats[:len(seq) - 1]) + [h for _, h in path]
        logits, _, nxt = self.drafter(ids, rows, torch.arange(len(rows)))
        return logits[-1], nxt[-1]

    def _top(self, logits: torch.Tensor, k: int) -> list[tuple[float, int]]:
        if k == 1:
            ids = [int(logits.argmax())]
            return [(1.0, int(ids[0] + self.d2t[ids[0]]))]
        p, ids = torch.softmax(logits, -1).topk(k)
        return [(float(s), int(i + self.d2t[i])) for s, i in zip(p, ids)]

    def _tree(self, seq: list[int], feats: torch.Tensor, steps: int, k: int, n: int
              ) -> dict[int, list[tuple[int, int]]]:
        """{pool index of a node (-1: root): (pool index, token) of each kept child}."""
        logits, hidden = self._node(seq, feats, [])
        # a pool entry: (score, token, parent pool index, path of (token, input hidden) from the root)
        pool = [(s, tok, -1, [(tok, hidden)]) for s, tok in self._top(logits, k)]
        frontier = list(range(k))
        for _ in range(1, steps):
            children = []
            for i in frontier:
                score, _, _, path = pool[i]
                logits, out = self._node(seq, feats, path)
                children += [(score * s, tok, i, path + [(tok, out)]) for s, tok in self._top(logits, k)]
            start = len(pool)
            pool += children
            ranked = sorted(range(len(children)), key=lambda c: -children[c][0])
            frontier = [start + c for c in ranked[:k]]
        kept = sorted(range(len(pool)), key=lambda e: -pool[e][0])[:n - 1]
        kids: dict[int, list[int]] = {}
        for e in kept:
            kids.setdefault(pool[e][2], []).append(e)
        return {parent: [(e, pool[e][1]) for e in entries] for parent, entries in kids.items()}

    @torch.no_grad()
    def accept_lengths(self, prompt: list[int], steps: int, k: int, n: int, new: int) -> list[int]:
        logits, _ = self._target(prompt)
        seq = prompt + [int(logits[-1].argmax())]
        produced, lengths = 1, []
        while produced < new and seq[-1] != self.eos:
            logits, feats = self._target(seq)
            tree = self._tree(seq, feats, steps, k, n)
            node, walked = -1, []
            while True:
                best = int(self._target(seq + walked)[0][-1].argmax())
                child = next((e for e, tok in tree.get(node, []) if tok == best), None)
                walked.append(best)
                if child is None:
                    break
                node = child
            lengths.append(len(walked))
            committed = walked[:new - produced]
            if self.eos in committed:
                committed = committed[:committed.index(self.eos) + 1]
            seq += committed
            produced += len(committed)
        return lengths


@pytest.fixture(scope="module")
def hf_target(toy):
    return AutoModelForCausalLM.from_pretrained(toy.target_dir, dtype=torch.float32).eval()


@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(map(str, c)) for c in CONFIGS])
@pytest.mark.parametrize("kind", KINDS)
def test_generate_equals_the_reference_loop_per_cycle(toy, hf_target, prompts, kind, cfg):
    steps, k, n = cfg
    got = generate(toy.target_dir, _drafter_dir(toy, kind), prompts, steps=steps, topk=k, num_draft_tokens=n,
                   max_new_tokens=NEW)
    ref = _Reference(hf_target, _drafter_dir(toy, kind))
    want = [ref.accept_lengths(list(t.encode()), steps, k, n, NEW) for t in TEXTS]
    assert [r.accept_lengths for r in got.results] == want
    assert got.mean_accept_length > 2.0  # drafts are accepted


@pytest.mark.parametrize("kind", KINDS)
def test_probe_equals_generate_per_prompt(toy, prompts, kind):
    steps, k, n = 3, 2, 6
    ref = generate(toy.target_dir, _drafter_dir(toy, kind), prompts, steps=steps, topk=k, num_draft_tokens=n,
                   max_new_tokens=NEW)
    got = probe(toy.target_dir, _drafter_dir(toy, kind), prompts, steps=steps, topk=k, num_draft_tokens=n,
                max_new_tokens=NEW, batch_size=2)
    assert [r.accept_lengths for r in got.results] == [r.accept_lengths for r in ref.results]
    assert got.target_disagreement == 0.0


def _without(toy, tmp_path: Path, flag: str) -> Path:
    """The EAGLE-3.1 drafter with ``flag`` off (and, for fc_norm, its tensors gone: the engines would
    otherwise drop them silently and draftlab refuses that)."""
    out = tmp_path / f"no-{flag}"
    shutil.copytree(toy.eagle31_dir, out)
    config = json.loads((out / "config.json").read_text())
    config[flag] = False
    (out / "config.json").write_text(json.dumps(config))
    tensors = {k: v for k, v in load_file(str(out / "model.safetensors")).items() if not k.startswith("fc_norm.")
               or flag != "fc_norm"}
    save_file(tensors, str(out / "model.safetensors"))
    return out


@pytest.mark.parametrize("flag", ["fc_norm", "norm_output"])
def test_dropping_an_eagle31_flag_changes_what_is_accepted(toy, prompts, tmp_path, flag):
    kw = dict(steps=3, topk=1, num_draft_tokens=4, max_new_tokens=NEW)
    full = generate(toy.target_dir, toy.eagle31_dir, prompts, **kw)
    dropped = generate(toy.target_dir, _without(toy, tmp_path, flag), prompts, **kw)
    assert [r.output_ids for r in dropped.results] == [r.output_ids for r in full.results]  # still lossless
    assert [r.accept_lengths for r in dropped.results] != [r.accept_lengths for r in full.results]


def test_the_drafter_caches_static_beside_a_dynamic_target(toy, prompts, monkeypatch):
    """Where cache "auto" means static (CUDA; here the CPU made to act as one) the DeepSeek target the static
    runtime lacks stays dynamic, while its MLA drafter gets the static cache (graphs on CUDA): the same
    accept lengths as both dynamic, in generate and in probe."""
    kw = dict(steps=3, topk=2, num_draft_tokens=6, max_new_tokens=NEW)
    dynamic = generate(toy.target_dir, toy.drafter_dir, prompts, **kw)
    assert dynamic.config["cache"] == dynamic.config["drafter_cache"] == "dynamic"
    monkeypatch.setattr(target_module, "STATIC_BY_DEFAULT", ("cuda", "cpu"))
    pair = load_pair(toy.target_dir, toy.drafter_dir)
    assert pair.target.cache == "dynamic" and pair.drafter.max_len == min(4096, pair.target.config.max_position_embeddings)
    static = generate(toy.target_dir, toy.drafter_dir, prompts, **kw)
    assert (static.config["cache"], static.config["drafter_cache"]) == ("dynamic", "static")
    assert [r.accept_lengths for r in static.results] == [r.accept_lengths for r in dynamic.results]
    assert static.mean_accept_length > 2.0
    probed = probe(toy.target_dir, toy.drafter_dir, prompts, **kw, batch_size=2)
    assert [r.accept_lengths for r in probed.results] == [r.accept_lengths for r in dynamic.results]
