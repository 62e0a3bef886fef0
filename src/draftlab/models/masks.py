"""Which cached and new entries each new token may attend to.

One rule serves the target and the drafter: a new token sees every cached entry and, among the new
entries, those ``tree_mask`` allows (causal when it is None); with a sliding window it also drops
keys ``window`` or more positions behind it (transformers' ``q - k < window``). Masks are bool,
True = may attend, shaped [n_new, n_cached + n_new].
"""

from __future__ import annotations

import torch

from draftlab.errors import DraftlabError


def new_token_mask(n: int, tree_mask: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """[n, n] bool: which new tokens each new token may attend to (causal when ``tree_mask`` is None)."""
    if tree_mask is None:
        return torch.ones(n, n, dtype=torch.bool, device=device).tril()
    if tree_mask.shape != (n, n):
        raise DraftlabError(f"tree_mask has shape {tuple(tree_mask.shape)}; expected ({n}, {n}) for {n} new tokens")
    return tree_mask.to(device=device, dtype=torch.bool)


def attention_mask(cached: int, tree_mask: torch.Tensor | None, n: int, device: torch.device) -> torch.Tensor:
    """[n, cached + n] bool: the full prefix plus the allowed new tokens."""
    prefix = torch.ones(n, cached, dtype=torch.bool, device=device)
    return torch.cat([prefix, new_token_mask(n, tree_mask, device)], dim=1)


def apply_window(mask: torch.Tensor, query_positions: torch.Tensor, key_positions: torch.Tensor,
                 window: int | None) -> torch.Tensor:
    """Drop keys at least ``window`` positions behind their query (no change when window is None): mask
    [..., n, S], query positions [..., n], key positions [..., S] (leading dims broadcast). vLLM's
    attention backends take the window as ``(window - 1, 0)``, the same rule (flash_attn.py)."""
    if window is None:
        return mask
    distance = query_positions[..., :, None] - key_positions[..., None, :]
    return mask & (distance < window)


def to_additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool mask -> [1, 1, n, S] additive float mask (0 or the dtype's minimum), for eager and sdpa alike."""
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    out.masked_fill_(~mask, torch.finfo(dtype).min)
    return out[None, None]
