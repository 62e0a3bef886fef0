"""Greedy speculative decoding with the walk on the device and the host a cycle behind
(``DRAFTLAB_CYCLE=pipelined``; opt-in until the GPU smoke run passes with it).

:class:`~draftlab.decode.decoder.SpeculativeDecoder` reads every verify back before it drafts again: the
walk, ``keep`` and the next extend's inputs are decided on the host while the GPU waits (session 15's
profile: about 0.9 ms of an 8B 3/1/4 cycle of 6.9 ms). At temperature 0 all a cycle decides is a
function of tensors already on the device, so here it is decided there:

    draft (the decoder's graph) -> verify (the target's bucketed step) -> the greedy walk
    (:func:`device_walk`) -> the target's cache keeps the accepted path -> draft-extend over the
    committed tokens (steps + 1 of them, those past the path written where nothing reads them)
    -> the next root and drafter state

The cache lengths are device tensors; the host keeps upper bounds of them (a cycle adds at most steps
+ 1 entries) for the read widths and the room. It queues the next cycle before it reads this one's
tokens back (into pinned memory, behind an event), so its own work runs while the GPU computes. A cycle
queued past the end (an EOS, ``max_new_tokens``) is dropped unread; where a bound could cross the
context or a cache's room, the host waits for the exact lengths first, so it stops exactly where the
host-walk decoder stops. The tokens and accept lengths are that decoder's (tested on the CPU, where
nothing overlaps).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from draftlab.decode.tree import DraftTree
from draftlab.engines.sglang_flags import SpecFlags

if TYPE_CHECKING:
    from draftlab.models.drafter import Eagle3Drafter
    from draftlab.models.target import TargetRunner

AHEAD = 2  # cycles queued at once: the one being read back and the next
# The draft from the drafter's state at a root, on the device: (root [1], logits, hidden, cached [1], bound)
# -> tree (SpeculativeDecoder.draft_at)
DraftAt = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int], DraftTree]


@dataclass
class DraftState:
    """The drafter's output at the last committed position: it predicts the token after the root."""

    logits: torch.Tensor  # [draft_vocab]
    hidden: torch.Tensor  # [H]


def device_walk(tree: DraftTree, argmax: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The greedy walk (:func:`~draftlab.decode.verify.greedy_walk`) without reading anything back: from the
    root, move to the child (the first in node order) whose token is the target's argmax at the current
    node, ``steps`` times at most. Returns the path's nodes [steps + 1] (repeating its last node after
    its end) and their count [1]; the committed tokens are ``argmax[path]``, the first count of them."""
    node = torch.zeros(1, dtype=torch.long, device=argmax.device)  # [1], not 0-d: indexing by a 0-d tensor reads it
    alive = torch.ones(1, dtype=torch.bool, device=argmax.device)
    path, count = [node], torch.ones(1, dtype=torch.long, device=argmax.device)
    for _ in range(steps):
        match = (tree.parents == node) & (tree.tokens == argmax[node])
        alive = alive & match.any()
        node = torch.where(alive, match.int().argmax(), node)
        count = count + alive
        path.append(node)
    return torch.cat(path), count


class _Queued:
    """A queued cycle's committed tokens and their count, copied to the host behind an event."""

    def __init__(self, count: torch.Tensor, tokens: torch.Tensor) -> None:
        values = torch.cat([count, tokens])
        if values.is_cuda:
            self._host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            self._host.copy_(values, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._host, self._event = values, None

    def tokens(self) -> list[int]:
        """The cycle's committed tokens (waits for the cycle, not for what was queued after it)."""
        if self._event is not None:
            self._event.synchronize()
        values = self._host.tolist()
        return values[1:1 + values[0]]


class PipelinedCycles:
    """The cycles of one prompt after its prefill and first draft-extend, queued ahead of the host.

    Both caches hold the same entries throughout (the prompt, then every committed token but the last:
    a cycle keeps its accepted path in the target's and extends the drafter's over it), so one length
    serves both: on the device for the steps, and on the host as read back."""

    def __init__(self, target: TargetRunner, drafter: Eagle3Drafter, flags: SpecFlags, draft_at: DraftAt,
                 root: int, state: DraftState) -> None:
        self.target, self.drafter, self.flags, self.draft_at = target, drafter, flags, draft_at
        self.steps = flags.steps
        device = state.logits.device
        self.root = torch.full((1,), root, dtype=torch.long, device=device)
        self.logits, self.hidden = state.logits, state.hidden
        self.known = target.cache_len  # exact, as read back (the drafter's cache_len too)
        self.length = torch.full((1,), self.known, dtype=torch.long, device=device)

    def run(self, produced: int, max_new_tokens: int) -> Iterator[list[int]]:
        """Each cycle's committed tokens, as the host-walk loop (``SpeculativeDecoder._cycles``) yields
        them, until ``max_new_tokens`` or the context's end; the caller stops at an EOS, and what was
        queued after is dropped."""
        queued: deque[_Queued] = deque()
        while True:
            while len(queued) < AHEAD and self._may_queue(produced, len(queued), max_new_tokens):
                queued.append(self._queue(len(queued)))
            if not queued:
                return
            tokens = queued.popleft().tokens()
            self.known += len(tokens)
            produced += len(tokens)
            yield tokens

    def _may_queue(self, produced: int, queued: int, max_new_tokens: int) -> bool:
        """Whether to queue a cycle now, ``queued`` unread ones before it. With none unread the length is
        exact and this is the host-walk loop's own test (tokens left, the verify inside the context).
        Otherwise each unread cycle commits 1 to steps + 1 tokens: queue only where the loop may still
        run the cycle and every bound fits (a cycle it would not run is dropped unread)."""
        if produced + queued >= max_new_tokens:
            return False
        steps, flags = self.steps, self.flags
        bound = self.known + queued * (steps + 1)
        context = self.target.config.max_position_embeddings
        if context is not None and bound + steps + 1 > context:
            return False
        widest_draft = max(flags.topk * (steps - 1), steps + 1)
        return queued == 0 or (bound + flags.num_draft_tokens <= self.target.max_len
                               and bound + widest_draft <= self.drafter.max_len)

    def _queue(self, queued: int) -> _Queued:
        """One whole cycle on the device; ``queued`` cycles before it are still unread."""
        steps = self.steps
        bound = self.known + queued * (steps + 1)
        tree = self.draft_at(self.root, self.logits, self.hidden, self.length, bound)
        logits, aux = self.target.static.forward_at(tree.tokens, self.length + tree.depth, tree.mask, self.length,
                                                    bound)
        argmax = logits.argmax(dim=-1)
        path, count = device_walk(tree, argmax, steps)
        self.target.static.keep(self.length, path)
        tokens = argmax[path]
        step = self.drafter.extend_at(tokens, aux[path], self.length, bound)
        last = count - 1
        self.logits, self.hidden = step.logits[last][0], step.hidden[last][0]
        self.root = tokens[last]
        self.length = self.length + count
        return _Queued(count, tokens)
