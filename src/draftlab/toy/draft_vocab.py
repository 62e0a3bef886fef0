"""The toy's draft vocabulary: the most frequent target tokens, sorted ascending, as d2t / t2d.

Kept to one function so that draftlab's SpecForge-exact vocabulary builder can replace it.
"""

from __future__ import annotations

import torch


def most_frequent_vocab(token_ids: torch.Tensor, vocab_size: int, draft_vocab_size: int
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """d2t (int64 offsets, target id = i + d2t[i]) and t2d (bool over the target vocabulary).

    Ties in frequency go to the lower id, so the result is deterministic.
    """
    counts = torch.bincount(token_ids.reshape(-1), minlength=vocab_size).double()
    order = torch.argsort(-counts, stable=True)  # stable: equal counts keep ascending id order
    used = torch.sort(order[:draft_vocab_size]).values
    d2t = used - torch.arange(draft_vocab_size)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[used] = True
    return d2t.to(torch.long), t2d
