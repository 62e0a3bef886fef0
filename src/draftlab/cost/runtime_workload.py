"""The passes of a cycle on the reference runtime (:mod:`draftlab.models`), ready to profile.

Each pass runs after a KV cache of ``context_tokens`` and is undone after it (``keep`` of nothing),
so every timed call sees the same cache length:

- verify (and decode, at 1 token): ``TargetRunner.forward`` over ``tokens`` new tokens, causal;
- draft step: ``Eagle3Drafter.forward`` over ``rows`` frontier nodes that see only themselves
  (the tree mask of one draft step), with the drafter's own hidden states;
- draft-extend: ``Eagle3Drafter.forward`` over ``tokens`` accepted tokens with target features.

The reference runtime runs one sequence at a time, so only batch size 1 can be measured here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from draftlab.cost.profile import ModelInfo
from draftlab.cost.profiler import Workload
from draftlab.errors import DraftlabError
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner


def runtime_workload(
    target: TargetRunner,
    drafter: Eagle3Drafter | None = None,
    *,
    context_tokens: int = 256,
    target_name: str | None = None,
    drafter_name: str | None = None,
    seed: int = 0,
) -> Workload:
    """Wrap a loaded target (and drafter) as a :class:`~draftlab.cost.profiler.Workload`."""
    cfg = target.config
    gen = torch.Generator().manual_seed(seed)
    device = target.device

    def ids(n: int) -> torch.Tensor:
        return torch.randint(0, cfg.vocab_size, (n,), generator=gen).to(device)

    context = ids(context_tokens)
    features = target.forward(context).aux  # [context, 3 x target hidden]
    target.reset()

    def verify(batch_size: int, tokens: int) -> Callable[[], object]:
        _batch_one(batch_size)
        target.reset()
        target.forward(context)
        new = ids(tokens)

        def run() -> None:
            target.forward(new)
            target.keep(new[:0])
        return run

    def drafter_pass(own_hidden: bool) -> Callable[[int, int], Callable[[], object]]:
        def factory(batch_size: int, tokens: int) -> Callable[[], object]:
            _batch_one(batch_size)
            assert drafter is not None
            drafter.reset()
            drafter.forward(context, features)
            new = ids(tokens)
            if own_hidden:  # frontier nodes: each sees the prefix and itself
                hidden = torch.randn(tokens, drafter.config.hidden_size, generator=gen)
                mask = torch.eye(tokens, dtype=torch.bool, device=device)
            else:  # accepted tokens with the target's features, causal
                hidden, mask = features[-tokens:], None
            hidden = hidden.to(device, features.dtype)

            def run() -> None:
                drafter.forward(new, hidden, tree_mask=mask)
                drafter.keep(new[:0])
            return run
        return factory

    return Workload(
        model=ModelInfo(
            target=target_name, drafter=drafter_name, model_type=cfg.model_type,
            hidden_size=cfg.hidden_size, num_layers=cfg.num_layers, vocab_size=cfg.vocab_size,
            dtype=str(target.dtype).removeprefix("torch."),
        ),
        device=device,
        verify=verify,
        draft_step=None if drafter is None else drafter_pass(own_hidden=True),
        draft_extend=None if drafter is None else drafter_pass(own_hidden=False),
        context_tokens=context_tokens,
    )


def _batch_one(batch_size: int) -> None:
    if batch_size != 1:
        raise DraftlabError(
            f"batch size {batch_size}: the reference runtime runs one sequence at a time; "
            "profile --batch-sizes 1 (larger batches need a batched runtime)"
        )
