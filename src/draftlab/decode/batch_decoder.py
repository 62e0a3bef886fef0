"""The speculative decoding loop over B prompts at once, in lockstep.

Each cycle is the batch-1 loop of :mod:`draftlab.decode.decoder` with every pass batched: one drafter
pass per draft step over B x (nodes so far) rows, one target verify over B x num_draft_tokens tokens,
one draft-extend over B x (longest accepted path). Rows accept different numbers of tokens; the
caches (:mod:`draftlab.models.batch_slots`) keep each row's own path and pad the rest. The trees are
the batch-1 functions' over a leading batch dimension (one set of device operations for all rows),
and the greedy walks read the trees and the target's argmax back once per cycle, then walk each row
on the host as the batch-1 walk does; so at temperature 0 every row's tokens and accept lengths are
exactly those of the batch-1 decoder (barring float ties under a different batch shape). Built and
walked row by row, a 5/4/8 cycle dispatched 59 operators per row (each a kernel launch on a GPU): 3,776
at batch 64, 5.2 ms on a 2-core CPU, against 49 and 0.40 ms for the whole batch now
(benchmarks/batch_trees.py).

At temperature > 0, as in the batch-1 decoder, every config, chains included, drafts the top-k tree
and verifies it with the lossless tree sampling walk (SGLang's and vLLM's way).

With no drafter (plain decoding) the loop is :func:`~draftlab.decode.plain_decode.plain_decode`: one
token per row and step, no host sync inside a step, each token after the prefill's a cycle of 1.

A finished row (EOS or ``max_new_tokens``) keeps riding along until the whole batch is done, as in a
static batch; its extra tokens are discarded and not counted.

Both caches are allocated with :func:`batch_cache_slots` slots per row and written in place; a
decoder keeps them (and the CUDA graphs of their steps) for its next call of the same batch size that
fits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from draftlab.decode.decoder import max_cache_len, pick_token, trim_commit
from draftlab.decode.plain_decode import plain_decode
from draftlab.decode.tree import DraftTree, draft_top_k, organize_draft_results, select_top_k
from draftlab.decode.verify import Walk, walk_trees
from draftlab.engines.sglang_flags import SpecFlags
from draftlab.errors import DraftlabError
from draftlab.models.batch_slots import left_pad
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.drafter_batch import BatchDrafter
from draftlab.models.target import TargetRunner
from draftlab.models.target_batch import BatchTarget


def batch_cache_slots(width: int, max_new_tokens: int, flags: SpecFlags | None) -> int:
    """Slots per row the batched caches can need for left-padded prompts ``width`` tokens wide.

    More than one row's :func:`~draftlab.decode.decoder.max_cache_len`: every row's cache grows by the
    longest accepted path of the cycle (shorter paths are padded), finished rows ride along, and the
    batch runs until its slowest row is done, at most ``max_new_tokens - 1`` cycles that each add up
    to ``steps + 1`` slots. So the bound is one row's that committed a full path every cycle."""
    depth = flags.steps if flags is not None else 0
    return max_cache_len(width, 1 + (max_new_tokens - 1) * (depth + 1), flags)


OnCommit = Callable[[int, list[int], "int | None"], None]  # (row, tokens added, accept length)


@dataclass
class RowResult:
    output_ids: list[int] = field(default_factory=list)
    accept_lengths: list[int] = field(default_factory=list)  # per cycle, bonus included, before trimming
    done: bool = False


class BatchSpeculativeDecoder:
    """EAGLE-3 speculative decoding of several prompts in one batch (SGLang's tree, lossless walks)."""

    def __init__(self, target: TargetRunner, drafter: Eagle3Drafter | None, flags: SpecFlags | None, *,
                 compile: bool | None = None) -> None:
        """``compile``: the batched target's plain decode steps with the layers' parts torch.compiled
        (:class:`~draftlab.models.target_batch.BatchTarget`; None: on CUDA, for a decoder that lives
        long, as the server's)."""
        if drafter is not None and flags is None:
            raise DraftlabError("speculative decoding needs flags (steps, topk, num_draft_tokens)")
        self.runner, self.drafter_model, self.flags, self.compile = target, drafter, flags, compile
        self._caches: tuple[BatchTarget, BatchDrafter | None] | None = None

    def caches(self, batch_size: int, capacity: int) -> tuple[BatchTarget, BatchDrafter | None]:
        """Empty batched caches for a call: the last call's when they are as wide and large enough (their
        CUDA graphs come with them, captured once per decoder), otherwise new ones."""
        held = self._caches
        if held is None or held[0].batch_size != batch_size or held[0].capacity < capacity:
            held = self._caches = None  # let the old buffers go before the new ones are allocated
            drafter = None if self.drafter_model is None else BatchDrafter(self.drafter_model, batch_size, capacity)
            held = self._caches = (BatchTarget(self.runner, batch_size, capacity, compile=self.compile), drafter)
        for cache in held:
            if cache is not None:
                cache.reset()
        return held

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float = 0.0,
                 ignore_eos: bool = False, seed: int | None = None,
                 on_commit: OnCommit | None = None) -> list[RowResult]:
        """Decode every prompt; one result per prompt, in order. ``on_commit(row, tokens, accept_length)``
        hears each commit of a live row as it is made (accept_length None for the prefill's token)."""
        report = on_commit or (lambda *_: None)
        if not prompts or any(not p for p in prompts):
            raise DraftlabError("every prompt needs at least one token")
        if max_new_tokens < 1:
            raise DraftlabError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        b = len(prompts)
        device = self.runner.device
        capacity = batch_cache_slots(max(len(p) for p in prompts), max_new_tokens, self.flags)
        target, drafter = self.caches(b, capacity)
        gen = torch.Generator(device=device)
        gen.manual_seed(seed) if seed is not None else gen.seed()
        eos = set() if ignore_eos else set(self.runner.eos_token_ids)
        if drafter is None:
            return self._plain(target, prompts, max_new_tokens, temperature, gen, eos, on_commit)
        limit = self.runner.config.max_position_embeddings
        depth = self.flags.steps
        rows = [RowResult() for _ in prompts]

        ids, positions, valid = left_pad(prompts, device)
        prefill = target.forward(ids, positions, new_valid=valid, last_only=True, max_position=ids.shape[1] - 1)
        roots = [pick_token(prefill.logits[i, -1], temperature, gen) for i in range(b)]
        for i, (row, root) in enumerate(zip(rows, roots)):
            report(i, self._commit(row, [root], None, max_new_tokens, eos), None)
        tokens = torch.cat([ids[:, 1:], torch.tensor(roots, device=device)[:, None]], dim=1)
        out = drafter.forward(tokens, prefill.aux, positions, new_valid=valid)
        state = (out.logits[:, -1], out.hidden[:, -1])

        while not all(r.done for r in rows):
            counts = target.slots.counts()
            known = counts.tolist()
            for i, row in enumerate(rows):
                if limit is not None and known[i] + depth + 1 > limit:
                    row.done = True  # the next verify would run past the target's context
            if all(r.done for r in rows):
                break
            trees = self._draft(drafter, roots, state)
            verify_positions = counts[:, None] + trees.depth
            deepest = max(known) + depth
            if limit is not None:  # finished rows ride along; keep their positions in range
                verify_positions = verify_positions.clamp(max=limit - 1)
                deepest = min(deepest, limit - 1)
            verify = target.forward(trees.tokens, verify_positions, tree_mask=trees.mask, max_position=deepest)
            walks = walk_trees(trees, verify.logits, temperature, gen)
            target.keep([w.nodes for w in walks])
            for i, (row, walk) in enumerate(zip(rows, walks)):
                if not row.done:
                    report(i, self._commit(row, walk.tokens, walk.accept_length, max_new_tokens, eos),
                           walk.accept_length)
            roots = [w.tokens[-1] for w in walks]
            if not all(r.done for r in rows):
                state = self._extend(drafter, walks, verify.aux, counts)
        return rows

    @staticmethod
    def _plain(target: BatchTarget, prompts: list[list[int]], max_new_tokens: int, temperature: float,
               gen: torch.Generator, eos: set[int], on_commit: OnCommit | None) -> list[RowResult]:
        """No drafter: :func:`~draftlab.decode.plain_decode.plain_decode`, each token after the prefill's
        counted as a cycle that accepted 1 (what a verify of the root alone commits)."""
        heard = [0] * len(prompts)

        def on_tokens(row: int, tokens: list[int]) -> None:
            for token in tokens:
                on_commit(row, [token], 1 if heard[row] else None)
                heard[row] += 1

        rows = plain_decode(target, prompts, max_new_tokens, temperature=temperature, gen=gen, eos=eos,
                            on_tokens=on_tokens if on_commit is not None else None)
        return [RowResult(output_ids=r, accept_lengths=[1] * (len(r) - 1), done=True) for r in rows]

    # -- pieces of one cycle ---------------------------------------------------------------------

    @staticmethod
    def _commit(row: RowResult, tokens: list[int], accept_length: int | None, max_new_tokens: int,
                eos: set[int]) -> list[int]:
        """Add a commit's tokens (trimmed at max_new_tokens / EOS) to ``row``; returns those added."""
        tokens, stopped = trim_commit(tokens, max_new_tokens - len(row.output_ids), eos)
        row.output_ids += tokens
        if accept_length is not None:
            row.accept_lengths.append(accept_length)
        row.done = stopped or len(row.output_ids) >= max_new_tokens
        return tokens

    def _extend(self, drafter: BatchDrafter, walks: list[Walk], aux: torch.Tensor,
                counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft-extend every row over its committed tokens (padded to the longest path)."""
        device = aux.device
        width = max(len(w.tokens) for w in walks)
        lengths = torch.tensor([len(w.tokens) for w in walks], device=device)
        tokens = torch.tensor([w.tokens + [0] * (width - len(w.tokens)) for w in walks], device=device)
        nodes = torch.tensor([w.nodes + [0] * (width - len(w.nodes)) for w in walks], device=device)
        features = aux.gather(1, nodes[:, :, None].expand(-1, -1, aux.shape[-1]))
        steps = torch.arange(width, device=device)
        out = drafter.forward(tokens, features, counts[:, None] + steps, new_valid=steps < lengths[:, None])
        last = (lengths - 1)[:, None]
        return (out.logits.gather(1, last[:, :, None].expand(-1, -1, out.logits.shape[-1]))[:, 0],
                out.hidden.gather(1, last[:, :, None].expand(-1, -1, out.hidden.shape[-1]))[:, 0])

    def _draft(self, drafter: BatchDrafter, roots: list[int],
               state: tuple[torch.Tensor, torch.Tensor]) -> DraftTree:
        """Every row's tree (a batch of trees), drafted with steps - 1 batched drafter passes and built
        for all rows at once (SGLang's rule per row)."""
        device = self.runner.device
        k, steps = self.flags.topk, self.flags.steps
        logits, root_hidden = state
        b = len(roots)
        counts = drafter.slots.counts()
        top_p, top_d = draft_top_k(logits, k)
        frontier, chunk = select_top_k(0, top_p, self.drafter_model.to_target_ids(top_d), None, k)
        chunks = [chunk]
        tokens = torch.empty(b, 0, dtype=torch.long, device=device)
        hidden = root_hidden.new_empty(b, 0, root_hidden.shape[-1])
        mask = torch.zeros(b, 0, 0, dtype=torch.bool, device=device)
        level = torch.full((b, k), -1, dtype=torch.long, device=device)  # run-set index of each frontier node
        out_hidden = None
        for step in range(1, steps):
            parent = level.gather(1, frontier.rows)  # [b, k] run-set index of each new node's parent
            n_old = tokens.shape[1]
            has_parent = parent >= 0
            tokens = torch.cat([tokens, frontier.tokens], dim=1)
            new_hidden = root_hidden[:, None].expand(b, k, -1)
            if out_hidden is not None:
                picked = out_hidden.gather(1, parent.clamp(min=0)[:, :, None].expand(-1, -1, out_hidden.shape[-1]))
                new_hidden = torch.where(has_parent[:, :, None], picked, new_hidden)
            hidden = torch.cat([hidden, new_hidden], dim=1)
            mask = torch.nn.functional.pad(mask, (0, k))
            new_rows = torch.zeros(b, k, n_old + k, dtype=torch.bool, device=device)
            if n_old:  # a node sees what its parent sees
                inherited = mask.gather(1, parent.clamp(min=0)[:, :, None].expand(-1, -1, n_old + k))
                new_rows = inherited & has_parent[:, :, None]
            new_rows[:, torch.arange(k), n_old + torch.arange(k)] = True
            mask = torch.cat([mask, new_rows], dim=1)
            node_depth = torch.arange(step, device=device).repeat_interleave(k)  # depth - 1 of every node
            out = drafter.forward(tokens, hidden, counts[:, None] + node_depth, tree_mask=mask)
            drafter.keep([[] for _ in range(b)])
            out_hidden = out.hidden
            level = (n_old + torch.arange(k, device=device)).expand(b, k)
            top_p, top_d = draft_top_k(out.logits[:, n_old:], k)
            frontier, chunk = select_top_k(step, top_p, self.drafter_model.to_target_ids(top_d), frontier, k)
            chunks.append(chunk)
        return organize_draft_results(chunks, torch.tensor(roots, device=device), self.flags.num_draft_tokens)
