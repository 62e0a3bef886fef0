"""Streaming similarity measures between two targets' hidden states and next-token distributions.

Every measure is accumulated over token positions in sums, so any number of prompts can be fed
one at a time and memory stays at O(hidden^2) per layer (for CKA) whatever the data size.

- cosine: mean over positions of cos(a_t, b_t);
- relative_l2: ||A - B||_F / ||A||_F over all positions (A is the reference target);
- cka: linear CKA (Kornblith et al., 2019) of the position x hidden matrices, columns centred:
  ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F), from uncentred second moments and sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LayerDrift:
    layer: int
    cosine: float
    relative_l2: float
    cka: float


class HiddenDrift:
    """Accumulates drift measures for one layer over batches of matching positions."""

    def __init__(self, layer: int) -> None:
        self.layer = layer
        self.n = 0
        self.cos_sum = 0.0
        self.diff_sq = 0.0
        self.ref_sq = 0.0
        self._moments: dict[str, torch.Tensor] = {}

    def update(self, a: torch.Tensor, b: torch.Tensor) -> None:
        """Add positions: ``a`` from the reference target, ``b`` from the other, both [n, hidden]."""
        if a.shape != b.shape or a.dim() != 2:
            raise ValueError(f"hidden states must be matching [n, hidden] tensors, got {tuple(a.shape)} and {tuple(b.shape)}")
        a64, b64 = a.double(), b.double()
        self.n += a.shape[0]
        self.cos_sum += torch.nn.functional.cosine_similarity(a64, b64, dim=-1).sum().item()
        self.diff_sq += (a64 - b64).square().sum().item()
        self.ref_sq += a64.square().sum().item()
        for key, value in (("aa", a64.T @ a64), ("bb", b64.T @ b64), ("ba", b64.T @ a64),
                           ("sa", a64.sum(0)), ("sb", b64.sum(0))):
            self._moments[key] = self._moments[key] + value if key in self._moments else value

    def result(self) -> LayerDrift:
        if self.n == 0:
            raise ValueError("no positions were added")
        m, n = self._moments, self.n
        mu_a, mu_b = m["sa"] / n, m["sb"] / n
        xx = m["aa"] - n * torch.outer(mu_a, mu_a)
        yy = m["bb"] - n * torch.outer(mu_b, mu_b)
        yx = m["ba"] - n * torch.outer(mu_b, mu_a)
        denom = torch.linalg.matrix_norm(xx) * torch.linalg.matrix_norm(yy)
        cka = (yx.square().sum() / denom).item() if denom > 0 else float("nan")
        rel = (self.diff_sq / self.ref_sq) ** 0.5 if self.ref_sq > 0 else float("nan")
        return LayerDrift(self.layer, self.cos_sum / n, rel, cka)


class NextTokenDrift:
    """Greedy next-token agreement and mean KL(A || B) of the next-token distributions."""

    def __init__(self) -> None:
        self.n = 0
        self.agree = 0
        self.kl_sum = 0.0

    def update(self, logits_a: torch.Tensor, logits_b: torch.Tensor) -> None:
        """Add positions; logits are [n, vocab] over the same vocabulary."""
        if logits_a.shape != logits_b.shape:
            raise ValueError(f"logits must match, got {tuple(logits_a.shape)} and {tuple(logits_b.shape)}")
        la = torch.log_softmax(logits_a.double(), dim=-1)
        lb = torch.log_softmax(logits_b.double(), dim=-1)
        self.n += la.shape[0]
        self.agree += (la.argmax(-1) == lb.argmax(-1)).sum().item()
        self.kl_sum += (la.exp() * (la - lb)).sum().item()

    @property
    def agreement(self) -> float:
        return self.agree / self.n if self.n else float("nan")

    @property
    def kl(self) -> float:
        return self.kl_sum / self.n if self.n else float("nan")
