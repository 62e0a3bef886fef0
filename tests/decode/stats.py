"""A chi-square goodness-of-fit p-value, for the sampling tests."""

from __future__ import annotations

from collections import Counter

import torch


def chi_square_p(samples: list, exact: dict) -> float:
    """P-value of ``samples`` under ``exact`` (outcome -> probability); cells with expected < 5 pooled."""
    n = len(samples)
    counts = Counter(samples)
    assert set(counts) <= set(exact), "a sample outside the support"
    big = [k for k, p in exact.items() if p * n >= 5]
    obs = [counts[k] for k in big]
    exp = [exact[k] * n for k in big]
    rest_exp = n - sum(exp)
    if rest_exp >= 5:
        obs.append(n - sum(obs))
        exp.append(rest_exp)
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
    dof = len(obs) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))
