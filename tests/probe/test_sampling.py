"""Temperature > 0: the expected-acceptance estimate, in closed form and against sampled decoding."""

import json
import statistics

import pytest
import torch

from draftlab.decode.generate import generate
from draftlab.decode.tree import PoolChunk
from draftlab.probe.probe import probe
from draftlab.probe.sampling import expected_accept_length, expected_by_step, expected_histogram, reach_by_depth


def test_closed_forms_for_a_constant_acceptance_rate():
    reach = torch.tensor([0.6, 0.36, 0.216]).expand(5, 7, 3)  # each depth accepted with probability 0.6
    assert torch.allclose(expected_accept_length(reach), torch.tensor(1 + 0.6 + 0.36 + 0.216))
    assert expected_by_step(reach) == pytest.approx([0.6, 0.6, 0.6])
    hist = expected_histogram(reach)
    assert hist == pytest.approx([0.0, 0.4, 0.6 * 0.4, 0.36 * 0.4, 0.216])
    assert sum(i * h for i, h in enumerate(hist)) == pytest.approx(1 + 0.6 + 0.36 + 0.216)


def _hand_tree() -> list[PoolChunk]:
    """One cycle, topk 2: depth 1 drafts ids 1 and 2; depth 2 the children (3, 0) of id 1 and (3, 1) of id 2."""
    def chunk(tokens, scores, parents):
        return PoolChunk(torch.tensor([[scores]]), torch.tensor([[tokens]]), torch.tensor([[parents]]))
    return [chunk([1, 2], [0.6, 0.25], [-1, -1]),
            chunk([3, 0, 3, 1], [0.6 * 0.5, 0.6 * 0.2, 0.25 * 0.8, 0.25 * 0.2], [0, 0, 1, 1])]


def test_reach_sums_the_target_probability_of_each_kept_path():
    # the 3 best of the pool's scores (0.6, 0.25, 0.3, 0.12, 0.2, 0.05) keep ids 1 and 2 at depth 1 and,
    # at depth 2, only id 3 under id 1
    target = torch.log(torch.tensor([[[0.25, 0.25, 0.25, 0.25],   # the row before the root: not used
                                      [0.1, 0.5, 0.3, 0.1],       # after the root: depth 1
                                      [0.2, 0.2, 0.2, 0.4]]]))    # after the text's next token: depth 2
    reach = reach_by_depth(_hand_tree(), 4, lambda pos: target[:, pos], temperature=1.0)
    assert reach[0, 0].tolist() == pytest.approx([0.5 + 0.3, 0.5 * 0.4])
    assert expected_accept_length(reach).item() == pytest.approx(2.0)
    # a sharper target (T = 0.5: p ** 2, renormalised) and a tree that keeps one more node (0.2: id 3 under id 2)
    sharp = reach_by_depth(_hand_tree(), 5, lambda pos: target[:, pos], temperature=0.5)
    p1, p2 = torch.tensor([0.1, 0.5, 0.3, 0.1]) ** 2, torch.tensor([0.2, 0.2, 0.2, 0.4]) ** 2
    p1, p2 = p1 / p1.sum(), p2 / p2.sum()
    assert sharp[0, 0].tolist() == pytest.approx([float(p1[1] + p1[2]), float(p1[1] * p2[3] + p1[2] * p2[3])])


@pytest.mark.parametrize("config", [(3, 1, 4), (4, 4, 8)], ids=["chain", "tree"])
def test_estimate_tracks_sampled_speculative_decoding_on_the_toy_pair(toy_pair, tmp_path, config):
    texts = ["def __init__(self, ", "import os\nimport sys\n\n", "    for i in range(len(", "class Foo(object):\n    "]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in texts))
    # at 0.7 the engines' top-1 chain accepts about 1.8 tokens a cycle here; the overlap formula of
    # drafts sampled from q (sum_x min(p, q)) would estimate about 2.6 and fail this test
    steps, topk, num_draft_tokens = config
    flags = dict(steps=steps, topk=topk, num_draft_tokens=num_draft_tokens, max_new_tokens=48, temperature=0.7)
    sampled = [n for seed in range(3)
               for r in generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, seed=seed, **flags).results
               for n in r.accept_lengths]
    estimates = [probe(toy_pair.target_dir, toy_pair.drafter_dir, prompts, seed=seed, **flags) for seed in range(3)]
    assert all(e.estimate and e.config["temperature"] == 0.7 for e in estimates)
    estimate = statistics.mean(e.mean_accept_length for e in estimates)
    assert 1.5 < statistics.mean(sampled) < steps + 1
    assert estimate == pytest.approx(statistics.mean(sampled), rel=0.12)
