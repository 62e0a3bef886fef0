"""Temperature > 0: the expected-acceptance estimate, in closed form and against sampled decoding."""

import json
import statistics

import pytest
import torch

from draftlab.errors import DraftlabError
from draftlab.probe.probe import probe
from draftlab.probe.sampling import chain_alphas, expected_accept_length, expected_by_step, expected_histogram
from draftlab.spec.generate import generate


def test_closed_forms_for_a_constant_acceptance_rate():
    alpha = torch.full((5, 7, 3), 0.6)
    assert torch.allclose(expected_accept_length(alpha), torch.tensor(1 + 0.6 + 0.36 + 0.216))
    assert expected_by_step(alpha) == pytest.approx([0.6, 0.6, 0.6])
    hist = expected_histogram(alpha)
    assert hist == pytest.approx([0.0, 0.4, 0.6 * 0.4, 0.36 * 0.4, 0.216])
    assert sum(i * h for i, h in enumerate(hist)) == pytest.approx(1 + 0.6 + 0.36 + 0.216)


def test_alpha_is_the_target_probability_of_the_drafters_top_token():
    draft = [torch.log(torch.tensor([[[0.3, 0.6, 0.1]]]))]  # draft vocab = target ids 1, 2, 3; top-1 -> id 2
    target = torch.log(torch.tensor([[[0.1, 0.2, 0.7, 0.0], [0.1, 0.2, 0.7, 0.0]]]))
    alpha = chain_alphas(draft, lambda pos: target[:, pos], torch.tensor([1, 2, 3]), temperature=1.0)
    assert alpha.item() == pytest.approx(0.7)  # not the overlap sum_x min(p, q) = 0.8 of sampled drafts
    sharper = chain_alphas(draft, lambda pos: target[:, pos], torch.tensor([1, 2, 3]), temperature=0.5)
    assert sharper.item() == pytest.approx(0.49 / (0.01 + 0.04 + 0.49))  # p at T: softmax(log p / T)


def test_estimate_tracks_sampled_speculative_decoding_on_the_toy_pair(toy_pair, tmp_path):
    texts = ["def __init__(self, ", "import os\nimport sys\n\n", "    for i in range(len(", "class Foo(object):\n    "]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in texts))
    # at 0.7 the engines' top-1 drafts accept about 1.8 tokens a cycle here; the overlap formula of
    # drafts sampled from q (sum_x min(p, q)) would estimate about 2.6 and fail this test
    flags = dict(steps=3, topk=1, num_draft_tokens=4, max_new_tokens=48, temperature=0.7)
    sampled = [n for seed in range(3)
               for r in generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, seed=seed, **flags).results
               for n in r.accept_lengths]
    estimates = [probe(toy_pair.target_dir, toy_pair.drafter_dir, prompts, seed=seed, **flags) for seed in range(3)]
    assert all(e.estimate and e.config["temperature"] == 0.7 for e in estimates)
    estimate = statistics.mean(e.mean_accept_length for e in estimates)
    assert 1.5 < statistics.mean(sampled) < 4
    assert estimate == pytest.approx(statistics.mean(sampled), rel=0.12)


def test_trees_at_temperature_above_zero_are_refused(toy_pair, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"input_ids": [65, 66]}) + "\n")
    with pytest.raises(DraftlabError, match="chains only"):
        probe(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=2, topk=2, num_draft_tokens=4,
              temperature=0.7)
