"""The speculative decoding loop, one prompt at a time (batch size 1).

    prefill the target (aux features captured) -> draft-extend the drafter over the prompt
    repeat:
        draft: build SGLang's tree from the drafter (steps passes, topk branching)
        verify: every tree node in one target forward with the tree mask
        walk: accept a path, add the bonus token; keep() only that path in the target's cache
        draft-extend: run the drafter over the newly committed tokens with the target's features

Without a drafter the tree is the root alone, so the same loop is plain decoding. At temperature > 0
the drafts stay the drafter's top-k, as SGLang and vLLM draft them, and the walk samples
(:func:`~draftlab.decode.verify.walk_tree`): the output follows the target's distribution exactly.

The drafter's cache holds only committed positions between cycles. Its draft passes re-run the
frontier's ancestors in one forward with a tree mask and then drop every entry they appended
(``keep`` of nothing), because a cached entry is visible to every later token and siblings must not
see each other. This costs the same number of drafter passes as SGLang (steps - 1 per cycle) and
the same math; only the token count of a pass grows with depth.

With ``DRAFTLAB_CYCLE=pipelined`` (opt-in), greedy decoding over static caches runs each cycle's walk,
``keep`` and draft-extend on the device and reads the tokens back a cycle late
(:mod:`draftlab.decode.pipeline`): the same tokens, without the host in the GPU's way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from draftlab.decode.pipeline import DraftState, PipelinedCycles
from draftlab.decode.tree import DraftTree, build_tree, draft_top_k, organize_draft_results, select_top_k
from draftlab.decode.verify import Walk, walk_tree
from draftlab.engines.sglang_flags import SpecFlags
from draftlab.errors import DraftlabError
from draftlab.models.graphs import BUCKETS, GraphSteps
from draftlab.models.kernels import pipelined_chosen

if TYPE_CHECKING:
    from draftlab.models.drafter import DraftStep, Eagle3Drafter
    from draftlab.models.target import TargetRunner


def max_cache_len(prompt_len: int, max_new_tokens: int, flags: SpecFlags | None) -> int:
    """KV-cache entries (target's and drafter's) that decoding one prompt can need: what a static
    cache must hold. Before a cycle both caches hold ``prompt_len + produced - 1`` entries, fewer than
    ``prompt_len + max_new_tokens``; a cycle appends at most its widest pass: the verified tree
    (``num_draft_tokens``) or the drafter's last draft pass (``topk x (steps - 1)`` nodes)."""
    widest = 1 if flags is None else max(flags.num_draft_tokens, flags.topk * (flags.steps - 1))
    return prompt_len + max_new_tokens + widest


@dataclass
class Commit:
    """Tokens made final together: the prefill's first token, then one verify cycle's."""

    tokens: list[int]  # after trimming to max_new_tokens / EOS
    accept_length: int | None  # tokens the cycle committed before trimming; None for the prefill


def pick_token(logits: torch.Tensor, temperature: float, gen: torch.Generator) -> int:
    """The token after a prefill: the argmax at temperature 0, else a sample of softmax(logits / T)."""
    if temperature == 0:
        return int(logits.argmax())
    return int(torch.multinomial(torch.softmax(logits.float() / temperature, -1), 1, generator=gen))


def trim_commit(tokens: list[int], room: int, eos: set[int]) -> tuple[list[int], bool]:
    """A cycle's tokens cut to the ``room`` left under max_new_tokens and after the first EOS;
    and whether an EOS ended the sequence."""
    tokens = tokens[:room]
    stop = next((i for i, t in enumerate(tokens) if t in eos), None)
    return (tokens, False) if stop is None else (tokens[: stop + 1], True)


def _rows(features: torch.Tensor, nodes: list[int]) -> torch.Tensor:
    """The verify's features at the accepted ``nodes``: a slice when they lead the tree (a chain's),
    else one gather."""
    if nodes == list(range(len(nodes))):
        return features[:len(nodes)]
    return features[torch.tensor(nodes, dtype=torch.long, device=features.device)]


class SpeculativeDecoder:
    """EAGLE-3 speculative decoding with SGLang's tree and lossless verification."""

    def __init__(self, target: TargetRunner, drafter: Eagle3Drafter | None, flags: SpecFlags | None) -> None:
        if drafter is not None and flags is None:
            raise DraftlabError("speculative decoding needs flags (steps, topk, num_draft_tokens)")
        if drafter is not None and flags.topk > drafter.config.draft_vocab_size:
            raise DraftlabError(f"--topk {flags.topk} is larger than the drafter's vocabulary "
                                f"({drafter.config.draft_vocab_size} tokens); use a smaller --topk")
        self.target = target
        self.drafter = drafter
        self.flags = flags
        # one graph per draft when every pass fits a bucket; wider passes run as the eager draft runs them
        fits = drafter is not None and flags.topk * (flags.steps - 1) <= BUCKETS[-1]
        self._draft_graphs = GraphSteps(self._draft_captured) if fits and drafter.graphs else None
        # greedy cycles on the device, the host a cycle behind (decode/pipeline.py): both caches static, every
        # step in a bucket, and the lossless walk (not a subclass's own)
        self._pipelined = (pipelined_chosen() and fits and target.static is not None and drafter.max_len is not None
                           and max(flags.num_draft_tokens, flags.steps + 1) <= BUCKETS[-1]
                           and type(self)._walk is SpeculativeDecoder._walk)

    @torch.inference_mode()
    def stream(
        self, input_ids: list[int], *, max_new_tokens: int, temperature: float = 0.0,
        ignore_eos: bool = False, seed: int | None = None,
    ) -> Iterator[Commit]:
        """Generate up to ``max_new_tokens`` tokens after ``input_ids``, yielding each commit."""
        if not input_ids:
            raise DraftlabError("the prompt is empty; give at least one token")
        if max_new_tokens < 1:
            raise DraftlabError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise DraftlabError(f"temperature must be >= 0, got {temperature}")
        context = self.target.config.max_position_embeddings
        if context is not None and len(input_ids) >= context:
            raise DraftlabError(
                f"the prompt has {len(input_ids)} tokens but the target's context is {context}; shorten it"
            )
        device = self.target.device
        gen = torch.Generator(device=device)
        if seed is None:
            gen.seed()
        else:
            gen.manual_seed(seed)
        eos = set() if ignore_eos else set(self.target.eos_token_ids)

        self.target.reset()
        prompt = torch.tensor(input_ids, dtype=torch.long, device=device)
        prefill = self.target.forward(prompt)
        root = pick_token(prefill.logits[-1], temperature, gen)
        yield Commit([root], None)
        produced = 1
        if root in eos:
            return
        state = None
        if self.drafter is not None:
            self.drafter.reset()
            state = self._extend(torch.cat([prompt[1:], prompt.new_tensor([root])]), prefill.aux)
        if self._pipelined and temperature == 0:
            cycles = PipelinedCycles(self.target, self.drafter, self.flags, self.draft_at, root, state).run(
                produced, max_new_tokens)
        else:
            cycles = self._cycles(root, state, produced, max_new_tokens, temperature, gen)
        for tokens in cycles:
            kept, stopped = trim_commit(tokens, max_new_tokens - produced, eos)
            produced += len(kept)
            yield Commit(kept, len(tokens))
            if stopped or produced >= max_new_tokens:
                return

    def _cycles(self, root: int, state: DraftState | None, produced: int, max_new_tokens: int, temperature: float,
                gen: torch.Generator) -> Iterator[list[int]]:
        """The cycles with the walk on the host: each one's committed tokens (the accepted drafts and the
        bonus), until ``max_new_tokens`` or the context's end. The caller stops at an EOS."""
        depth = self.flags.steps if self.drafter is not None else 0
        context = self.target.config.max_position_embeddings
        while produced < max_new_tokens:
            if context is not None and self.target.cache_len + depth + 1 > context:
                return  # the next verify would run past the target's context
            tree = self._draft(root, state)
            verify = self.target.forward(tree.tokens, tree_mask=tree.mask, positions=self.target.cache_len + tree.depth,
                                         max_position=self.target.cache_len + depth)
            walk = self._walk(tree, verify.logits, temperature, gen)
            self.target.keep(walk.nodes)  # a chain's accepted prefix moves nothing
            yield walk.tokens
            produced += len(walk.tokens)
            root = walk.tokens[-1]
            if self.drafter is not None and produced < max_new_tokens:
                new = torch.tensor(walk.tokens, dtype=torch.long, device=self.target.device)
                state = self._extend(new, _rows(verify.aux, walk.nodes))

    # -- pieces of one cycle ---------------------------------------------------------------------

    def _walk(self, tree: DraftTree, logits: torch.Tensor, temperature: float, gen: torch.Generator) -> Walk:
        """Verification: the lossless walk (a synthetic-acceptance decoder forces its own instead)."""
        return walk_tree(tree, logits, temperature, gen)

    def _extend(self, tokens: torch.Tensor, features: torch.Tensor) -> DraftState:
        """Draft-extend: the drafter over committed tokens with the target's features."""
        step = self.drafter.forward(tokens, features)
        return DraftState(step.logits[-1], step.hidden[-1])

    def _draft(self, root: int, state: DraftState | None) -> DraftTree:
        """SGLang's draft tree (the root alone without a drafter). Drafts are the drafter's top-k at
        every temperature, as in SGLang and vLLM: sampling only happens in the walk. A drafter whose
        steps run as CUDA graphs drafts through one graph of the whole draft (its passes, top-k and
        tree) per set of read widths, which keeps the host from setting the cycle's pace."""
        if self.drafter is None:
            none = torch.empty(0, dtype=torch.long, device=self.target.device)
            return build_tree(root, none, none)
        cached = self.drafter.cache_len
        if self._draft_graphs is None:
            return self._draft_nodes(root, state.logits, state.hidden, cached)
        device = state.logits.device
        return self.draft_at(torch.full((1,), root, device=device), state.logits, state.hidden,
                             torch.full((1,), cached, device=device), cached)

    def draft_at(self, root: torch.Tensor, logits: torch.Tensor, hidden: torch.Tensor, cached: torch.Tensor,
                 bound: int) -> DraftTree:
        """The draft from the drafter's state at ``root`` ([1]) after ``cached`` drafter entries counted on
        the device ([1]), as its CUDA graph runs it (directly where there are no graphs); ``bound``, the
        host's upper bound on ``cached``, sets the passes' read widths."""
        k, steps = self.flags.topk, self.flags.steps
        reads = [self.drafter.tree_reads(bound, k * step) for step in range(1, steps)]
        run = self._draft_graphs or self._draft_captured
        return DraftTree(*run(root, logits, hidden, cached, *reads))

    def _draft_captured(self, root: torch.Tensor, logits: torch.Tensor, hidden: torch.Tensor, cached: torch.Tensor,
                        *reads: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The draft as a CUDA graph runs it: the cache length and the passes' read slots as tensors."""
        tree = self._draft_nodes(root, logits, hidden, cached, reads)
        return tree.tokens, tree.parents, tree.depth, tree.mask

    def _draft_nodes(self, root: int | torch.Tensor, logits: torch.Tensor, hidden: torch.Tensor,
                     cached: int | torch.Tensor, reads: tuple[torch.Tensor, ...] = ()) -> DraftTree:
        """The draft from the drafter's state at the root (``logits``, ``hidden``), its cache holding
        ``cached`` entries. Nothing is read back from the device. ``reads``: each pass runs
        :meth:`~draftlab.models.drafter.Eagle3Drafter.tree_pass` with these read slots (inside a
        graph capture) instead of :meth:`~draftlab.models.drafter.Eagle3Drafter.forward`."""
        k, steps = self.flags.topk, self.flags.steps
        top_p, top_d = draft_top_k(logits, k)
        frontier, chunk = select_top_k(0, top_p, self.drafter.to_target_ids(top_d), None, k)
        chunks = [chunk]
        nodes = _DraftNodes(hidden, k)
        for step in range(1, steps):
            nodes.add_level(frontier.tokens, frontier.rows)
            out = nodes.run(self.drafter, cached, reads[step - 1] if reads else None)
            top_p, top_d = draft_top_k(out.logits[-k:], k)  # the newest level: the frontier, in its order
            frontier, chunk = select_top_k(step, top_p, self.drafter.to_target_ids(top_d), frontier, k)
            chunks.append(chunk)
        return organize_draft_results(chunks, root, self.flags.num_draft_tokens)


class _DraftNodes:
    """Draft nodes run through the drafter so far this cycle, re-run together at each pass: one level
    of ``k`` nodes per pass, each level in its frontier's order, all on the device."""

    def __init__(self, root_hidden: torch.Tensor, k: int) -> None:
        self.root_hidden, self.k = root_hidden, k
        device = root_hidden.device
        self.tokens = torch.empty(0, dtype=torch.long, device=device)
        self.parents = torch.empty(0, dtype=torch.long, device=device)  # run-set index, -1: the root
        self.mask = torch.zeros(0, 0, dtype=torch.bool, device=device)  # node i attends node j
        self.out_hidden: torch.Tensor | None = None  # outputs of the last run, one row per node

    def add_level(self, tokens: torch.Tensor, rows: torch.Tensor) -> None:
        """The frontier's k nodes: ``tokens`` under the previous level's nodes ``rows`` (the root's at
        the first level). Each attends its parent's ancestors and itself."""
        n, k = self.tokens.numel(), self.k
        if n == 0:
            parents, above = torch.full_like(rows, -1), torch.zeros(k, 0, dtype=torch.bool, device=rows.device)
        else:
            parents = n - k + rows
            above = self.mask[parents]
        self.mask = torch.cat([torch.nn.functional.pad(self.mask, (0, k)),
                               torch.cat([above, torch.eye(k, dtype=torch.bool, device=rows.device)], dim=1)])
        self.tokens = torch.cat([self.tokens, tokens.long()])
        self.parents = torch.cat([self.parents, parents])

    def run(self, drafter: Eagle3Drafter, cached: int | torch.Tensor, read: torch.Tensor | None) -> DraftStep:
        """One drafter pass over every node (each sees its ancestors) after ``cached`` entries, leaving
        the drafter's cache as it was. A node's input is its parent's output (the root's state for the
        first level). ``read``: run as :meth:`~draftlab.models.drafter.Eagle3Drafter.tree_pass`."""
        n, k = self.tokens.numel(), self.k
        device = self.root_hidden.device
        hidden = [self.root_hidden.expand(k, -1)]
        if n > k:
            hidden.append(self.out_hidden[self.parents[k:]])
        positions = cached + torch.arange(n, device=device) // k  # depth - 1
        if read is not None:
            out = drafter.tree_pass(self.tokens, torch.cat(hidden), positions, self.mask, cached, read)
        else:
            out = drafter.forward(self.tokens, torch.cat(hidden), positions=positions, tree_mask=self.mask)
            drafter.keep(torch.empty(0, dtype=torch.long, device=device))
        self.out_hidden = out.hidden
        return out
