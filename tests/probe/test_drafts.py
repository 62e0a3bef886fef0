"""The batched drafter for every cycle start reproduces the decoder's own draft tree, node for node.

For each kept node of the tree the reference decoder builds after a prompt, a row whose text spells
the path to that node (and is unknown after it) must accept exactly that node's depth.
"""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from tiny_drafters import drafter_tensors, tied_head, write_specforge  # noqa: E402
from tiny_targets import tiny_target  # noqa: E402

from draftlab.decode.decoder import SpeculativeDecoder  # noqa: E402
from draftlab.engines.sglang_flags import resolve_spec_flags  # noqa: E402
from draftlab.models.drafter import Eagle3Drafter  # noqa: E402
from draftlab.models.target import TargetRunner  # noqa: E402
from draftlab.probe.drafts import accepted_drafts, drafted_trees  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    runner = TargetRunner(tiny_target("llama"), aux_layers=[0, 2, 3])
    folder = write_specforge(tmp_path_factory.mktemp("d") / "drafter", drafter_tensors(with_embed=False, seed=3))
    return runner, Eagle3Drafter.load(folder, target=runner)


def _paths(tree):
    """(depth, tokens from the root's child down) of every kept node reachable from the root."""
    parents, tokens, out = tree.parents.tolist(), tree.tokens.tolist(), []
    for node in range(1, tree.size):
        path = [node]
        while parents[path[-1]] > 0:
            path.append(parents[path[-1]])
        if parents[path[-1]] == 0:
            out.append([tokens[i] for i in reversed(path)])
    return out


@pytest.mark.parametrize("cfg", [(3, 1, 4), (2, 2, 4), (4, 4, 8), (5, 4, 8), (3, 3, 6)])
def test_every_kept_node_is_accepted_at_its_depth(pair, cfg):
    runner, drafter = pair
    flags = resolve_spec_flags(*cfg)
    decoder = SpeculativeDecoder(runner, drafter, flags)
    torch.manual_seed(sum(cfg))
    for prompt_len in (1, 6):
        prompt = torch.randint(0, 97, (prompt_len,))
        runner.reset()
        prefill = runner.forward(prompt)
        root = int(prefill.logits[-1].argmax())
        drafter.reset()
        state = decoder._extend(torch.cat([prompt[1:], prompt.new_tensor([root])]), prefill.aux)
        paths = _paths(decoder._draft(root, state))
        assert len(paths) == flags.num_draft_tokens - 1
        assert max(len(p) for p in paths) > 1 or flags.steps == 1

        width = prompt_len + 1 + flags.steps
        tokens = torch.zeros(len(paths), width, dtype=torch.long)
        truth = torch.full((len(paths), width + flags.steps + 1), -1)
        for row, path in enumerate(paths):
            known = prompt.tolist() + [root] + path
            tokens[row, :len(known)] = torch.tensor(known)
            truth[row, :len(known)] = torch.tensor(known)
        aux = runner.forward_batch(tokens).aux
        accepted = accepted_drafts(drafter, tokens, aux, truth, flags)
        assert accepted[:, prompt_len - 1].tolist() == [len(p) for p in paths]


def test_topk_one_drafts_the_first_maximum_of_tied_logits(pair, tmp_path):
    """An all-zero lm_head ties every draft step over the whole draft vocabulary: SGLang drafts draft id 0
    (argmax, the first maximum), here mapped to token 64, so each cycle accepts the run of 64s after its
    root (softmax(...).topk(1) picks a later index on the CPU and accepts nothing)."""
    runner, _ = pair
    tensors = tied_head(drafter_tensors(with_embed=False, seed=3), 64)
    drafter = Eagle3Drafter.load(write_specforge(tmp_path / "tied", tensors), target=runner)
    text = [1, 2, 3, 64, 64, 64, 4, 64, 9, 64, 64, 64, 64, 64, 64, 5]
    flags = resolve_spec_flags(3, 1, 4)
    tokens = torch.tensor([text])
    truth = torch.full((1, len(text) + flags.steps + 1), -1)
    truth[0, :len(text)] = tokens[0]
    aux = runner.forward_batch(tokens).aux
    expected = []
    for root in range(1, len(text)):  # the run of 64s after the root, at most steps
        run = 0
        while run < flags.steps and int(truth[0, root + 1 + run]) == 64:
            run += 1
        expected.append(run)
    assert max(expected) == flags.steps
    assert accepted_drafts(drafter, tokens, aux, truth, flags)[0].tolist() == expected
    for chunk in drafted_trees(drafter, tokens, aux, flags):  # the pool the T > 0 estimate reads
        assert chunk.tokens.eq(64).all() and chunk.scores.eq(1.0).all()
