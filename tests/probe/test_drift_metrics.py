import math

import torch

from draftlab.probe.drift_metrics import HiddenDrift, NextTokenDrift


def _drift(a, b, chunks=1):
    d = HiddenDrift(layer=3)
    for ca, cb in zip(a.chunk(chunks), b.chunk(chunks)):
        d.update(ca, cb)
    return d.result()


def test_identical_states_give_perfect_scores():
    a = torch.randn(50, 16)
    r = _drift(a, a.clone())
    assert math.isclose(r.cosine, 1.0, abs_tol=1e-12)
    assert r.relative_l2 == 0.0
    assert math.isclose(r.cka, 1.0, abs_tol=1e-9)


def test_cka_is_invariant_to_rotation_and_scale_but_cosine_is_not():
    torch.manual_seed(0)
    a = torch.randn(200, 8, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64))
    r = _drift(a, 3.0 * a @ q)
    assert math.isclose(r.cka, 1.0, abs_tol=1e-9)
    assert r.cosine < 0.9
    assert r.relative_l2 > 0.5


def test_cka_matches_direct_formula_and_streaming_matches_one_batch():
    torch.manual_seed(1)
    a = torch.randn(120, 6, dtype=torch.float64)
    b = a + 0.7 * torch.randn(120, 6, dtype=torch.float64)
    x, y = a - a.mean(0), b - b.mean(0)
    expected = ((y.T @ x).square().sum() / (torch.linalg.matrix_norm(x.T @ x) * torch.linalg.matrix_norm(y.T @ y))).item()
    one, streamed = _drift(a, b), _drift(a, b, chunks=7)
    assert math.isclose(one.cka, expected, rel_tol=1e-9)
    assert math.isclose(streamed.cka, expected, rel_tol=1e-9)
    assert math.isclose(streamed.cosine, one.cosine, rel_tol=1e-12)
    assert math.isclose(streamed.relative_l2, ((a - b).norm() / a.norm()).item(), rel_tol=1e-9)


def test_more_noise_moves_every_measure_the_right_way():
    torch.manual_seed(2)
    a = torch.randn(300, 12)
    small = _drift(a, a + 0.1 * torch.randn_like(a))
    large = _drift(a, a + 1.0 * torch.randn_like(a))
    assert large.cosine < small.cosine < 1.0
    assert large.relative_l2 > small.relative_l2 > 0.0
    assert large.cka < small.cka < 1.0


def test_next_token_agreement_and_kl():
    torch.manual_seed(3)
    la = torch.randn(40, 10)
    same = NextTokenDrift()
    same.update(la, la.clone())
    assert same.agreement == 1.0 and abs(same.kl) < 1e-12

    lb = la.clone()
    lb[:10] = -lb[:10]  # flips the argmax of the first quarter
    other = NextTokenDrift()
    other.update(la, lb)
    assert other.agreement == 0.75
    pa, pb = torch.softmax(la.double(), -1), torch.softmax(lb.double(), -1)
    expected_kl = (pa * (pa.log() - pb.log())).sum(-1).mean().item()
    assert math.isclose(other.kl, expected_kl, rel_tol=1e-9)
