"""``draftlab serve --synthetic-acceptance``: the reference decoder with acceptance forced, as engines force it.

Each cycle drafts and verifies as usual (so a cycle costs what a real one does), then accepts drafts
by the requested per-position rates instead of the target's argmax (:mod:`draftlab.acceptance.synthetic`,
vLLM's rule: draft i accepted with probability m_i / m_{i-1} given the drafts before it were, the
chain stopping at the first rejection). The draws come from one stream seeded by ``seed``: the same
requests in the same order get the same accept lengths.

What is emitted is what vLLM's synthetic mode and SGLang's ``real-draft-token`` mode emit: the
accepted draft tokens, then the target's own token after them (its argmax at temperature 0, a
sample of its distribution otherwise). The text is therefore not the target's greedy output: it
holds drafter tokens the target may not have chosen, and every later token is the target's
continuation of that text. Forcing needs a chain (``--topk 1``), as SGLang's real-draft-token mode does.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import torch

from draftlab.acceptance.synthetic import OPTION, SyntheticAcceptance, accepted_drafts, forced_conditionals
from draftlab.decode.decoder import SpeculativeDecoder, pick_token
from draftlab.decode.verify import Walk
from draftlab.errors import DraftlabError

if TYPE_CHECKING:
    from draftlab.decode.tree import DraftTree
    from draftlab.engines.sglang_flags import SpecFlags
    from draftlab.models.drafter import Eagle3Drafter
    from draftlab.models.target import TargetRunner


def check_forceable(synthetic: SyntheticAcceptance, flags: SpecFlags) -> None:
    """Refuse a request these flags cannot run: a tree, or more acceptance than the drafts allow."""
    if flags.topk != 1:
        raise DraftlabError(f"{OPTION} forces acceptance along a chain (vLLM drafts chains; SGLang's "
                            f"real-draft-token mode needs topk 1); use --topk 1, not {flags.topk}")
    synthetic.accept_length_for(flags.steps)


class SyntheticDecoder(SpeculativeDecoder):
    """:class:`SpeculativeDecoder` whose verification accepts by the requested rates."""

    def __init__(self, target: TargetRunner, drafter: Eagle3Drafter, flags: SpecFlags,
                 synthetic: SyntheticAcceptance, *, seed: int = 0) -> None:
        check_forceable(synthetic, flags)
        super().__init__(target, drafter, flags)
        self.synthetic = synthetic
        self.conditionals = forced_conditionals(synthetic, flags.steps)
        self.rng = random.Random(seed)

    def _walk(self, tree: DraftTree, logits: torch.Tensor, temperature: float, gen: torch.Generator) -> Walk:
        """Accept the first drafts as drawn, then the target's token where the chain stopped (the bonus)."""
        children = tree.children()
        node, nodes, tokens = 0, [0], []
        for _ in range(accepted_drafts(self.conditionals, self.rng)):
            if not children[node]:  # the drafter proposed fewer tokens than steps (never for a chain)
                break
            node = children[node][0]
            nodes.append(node)
            tokens.append(int(tree.tokens[node]))
        tokens.append(pick_token(logits[node], temperature, gen))
        return Walk(nodes, tokens)
