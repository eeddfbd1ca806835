"""Per-sample symmetric InfoNCE (ugncl/methods/infonce.py)."""

import math

import pytest
import torch
import torch.nn.functional as F

from ugncl.methods.infonce import clip_loss, info_nce_per_sample, weighted_mean


def test_two_by_two_by_hand():
    # S = I: each direction is -log(e / (e + 1)) = log(1 + e^-1); the mean of two equal terms.
    per = info_nce_per_sample(torch.eye(2))
    assert torch.allclose(per, torch.full((2,), math.log1p(math.exp(-1))))


def test_mean_equals_torch_cross_entropy_both_directions():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(7, 7, generator=g) * 5
    target = torch.arange(7)
    expected = 0.5 * (F.cross_entropy(s, target) + F.cross_entropy(s.T, target))
    assert torch.allclose(clip_loss(s), expected, atol=1e-6)
    assert torch.allclose(info_nce_per_sample(s[None]), info_nce_per_sample(s))  # (1, K, K)
    # Per sample, not symmetric by accident: the two directions are distinct terms.
    i2t = F.cross_entropy(s, target, reduction="none")
    t2i = F.cross_entropy(s.T, target, reduction="none")
    assert torch.allclose(info_nce_per_sample(s), 0.5 * (i2t + t2i), atol=1e-6)


def test_stable_for_huge_logits():
    g = torch.Generator().manual_seed(1)
    s = torch.randn(5, 5, generator=g, dtype=torch.float64) * 1e4
    per = info_nce_per_sample(s.float())
    assert torch.isfinite(per).all()
    ref = 0.5 * (torch.logsumexp(s, 1) + torch.logsumexp(s, 0)) - torch.diagonal(s)
    assert torch.allclose(per.double(), ref, rtol=1e-5, atol=1e-2)
    # The release's plain exp (SDD InfoNCELoss) overflows here.
    assert not torch.isfinite(
        -torch.log(torch.exp(s.float()).diagonal() / torch.exp(s.float()).sum(1))
    ).all()


def test_weighted_mean_divides_by_k_or_sum_of_weights():
    v = torch.tensor([1.0, 2.0, 3.0])
    w = torch.tensor([1.0, 0.0, 1.0])
    assert weighted_mean(v, w).item() == pytest.approx(4 / 3)
    assert weighted_mean(v, w, normalise=True).item() == pytest.approx(2.0)
    assert weighted_mean(v, torch.zeros(3), normalise=True).item() == 0.0
    assert weighted_mean(v).item() == pytest.approx(2.0)
    with pytest.raises(ValueError):
        weighted_mean(v, torch.ones(2))


def test_rejects_non_square():
    with pytest.raises(ValueError, match=r"\(K, K\)"):
        info_nce_per_sample(torch.zeros(2, 3))
