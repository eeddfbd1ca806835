"""Tests of ugncl.methods.ugncl.evidential: evidence, opinions, DST fusion, EDL loss,
trusted-margin factors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Dirichlet, kl_divergence

from ugncl.methods.ugncl.evidential import (
    ds_combine,
    ds_combine_many,
    edl_loss,
    edl_terms,
    evidence,
    log_ds_combine_many,
    log_evidence,
    min_log_evidence,
    opinion,
    trusted_margin_factor,
)

D64 = torch.float64


def tmc_literal(alpha1: torch.Tensor, alpha2: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The reduced DST rule exactly as printed (TMC / METHOD 4), as an independent reference."""
    K = alpha1.shape[-1]
    S1, S2 = alpha1.sum(-1, keepdim=True), alpha2.sum(-1, keepdim=True)
    b1, b2 = (alpha1 - 1) / S1, (alpha2 - 1) / S2
    u1, u2 = K / S1, K / S2
    C = b1.sum(-1, keepdim=True) * b2.sum(-1, keepdim=True) - (b1 * b2).sum(-1, keepdim=True)
    b = (b1 * b2 + b1 * u2 + b2 * u1) / (1 - C)
    u = u1 * u2 / (1 - C)
    return b * (K / u) + 1, b, u.squeeze(-1)


# ------------------------------------------------------------------------------ evidence


def test_evidence_hand_values():
    """softplus(0) = ln 2, so log e = ln 2 / 0.1 = 10 ln 2 and e = 2**10 = 1024 ("keep"),
    1023 ("subtract"). softplus(-1e4) = 0 in float32, so e = exp(0) = 1 exactly (the floor),
    and 0 with "subtract"."""
    raw = torch.tensor([0.0, -1e4])
    assert log_evidence(raw)[0].item() == pytest.approx(10 * math.log(2), rel=1e-6)
    assert evidence(raw).tolist() == pytest.approx([1024.0, 1.0], rel=1e-5)
    assert evidence(raw)[1].item() == 1.0
    assert evidence(raw, floor="subtract").tolist() == pytest.approx([1023.0, 0.0], rel=1e-5)


@pytest.mark.parametrize("floor", ["keep", "subtract"])
def test_evidence_finite_forward_backward_up_to_1e4(floor):
    """|raw| <= 1e4: evidence finite and capped at exp(50); gradient finite, >= 0 and equal to
    the straight-through slope sigmoid(raw)/tau * e (d e / d log e = e) everywhere."""
    raw = torch.cat([torch.linspace(-1e4, 1e4, 2001), torch.tensor([4.9, 5.0, 9.0, 1e4])])
    raw.requires_grad_(True)
    log_e = log_evidence(raw)
    e = evidence(raw, floor=floor)
    assert torch.isfinite(e).all() and torch.isfinite(log_e).all()
    assert log_e.max().item() == pytest.approx(50.0)
    assert e.max().item() <= math.exp(50.0) * (1 + 1e-6)
    log_e.sum().backward()
    assert torch.isfinite(raw.grad).all()
    expected = torch.sigmoid(raw.detach()) / 0.1
    torch.testing.assert_close(raw.grad, expected)
    # Above the ceiling the gradient is not killed (straight-through): 1/tau at raw = 1e4.
    assert raw.grad[-1].item() == pytest.approx(10.0)
    raw.grad = None
    e.sum().backward()
    assert torch.isfinite(raw.grad).all() and (raw.grad >= 0).all()


def test_evidence_half_precision_is_upcast_and_bad_args_raise():
    """fp16 cannot hold exp(50); evidence comes back in float32."""
    out = evidence(torch.tensor([10.0], dtype=torch.float16))
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="floor"):
        evidence(torch.zeros(2), floor="drop")
    with pytest.raises(ValueError, match="tau"):
        log_evidence(torch.zeros(2), tau=0.0)


def test_log_evidence_without_ceiling_keeps_ranking():
    """ceiling=None gives softplus(raw)/tau unclamped (for ranking in log space)."""
    raw = torch.tensor([6.0, 8.0, 100.0])
    assert log_evidence(raw, ceiling=None).tolist() == pytest.approx(
        (torch.nn.functional.softplus(raw) / 0.1).tolist()
    )


# ------------------------------------------------------------------------------- opinion


def test_opinion_hand_values():
    """alpha = [2, 1, 1]: S = 4, b = (alpha - 1)/S = [1/4, 0, 0], u = K/S = 3/4."""
    b, u, S = opinion(torch.tensor([[2.0, 1.0, 1.0]]))
    assert S.tolist() == [4.0]
    assert b.tolist() == [[0.25, 0.0, 0.0]]
    assert u.tolist() == [0.75]


# ------------------------------------------------------------------------------------ DST


def test_ds_combine_hand_value():
    """K = 2, both views alpha = [2, 1]: S = 3, b = [1/3, 0], u = 2/3, C = b1_0 b2_1 +
    b1_1 b2_0 = 0. b = b1 b2 + b1 u2 + b2 u1 = [1/9 + 2/9 + 2/9, 0] = [5/9, 0], u = 4/9,
    S = K/u = 9/2, alpha = b S + 1 = [3.5, 1]. (Evidence form: e = 1 + 1 + 1*1/2 = 2.5.)"""
    a = torch.tensor([[2.0, 1.0]], dtype=D64)
    alpha, b, u = ds_combine(a, a)
    torch.testing.assert_close(alpha, torch.tensor([[3.5, 1.0]], dtype=D64))
    torch.testing.assert_close(b, torch.tensor([[5 / 9, 0.0]], dtype=D64))
    torch.testing.assert_close(u, torch.tensor([4 / 9], dtype=D64))


def _random_alpha(n: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 1.0 + torch.rand(n, k, generator=g, dtype=D64) ** 3 * 20.0


def test_ds_combine_equals_literal_tmc_rule():
    """The evidence form e1 + e2 + e1 e2 / K is the printed rule (b, u, 1 - C) rewritten."""
    a1, a2 = _random_alpha(16, 7, 0), _random_alpha(16, 7, 1)
    for got, ref in zip(ds_combine(a1, a2), tmc_literal(a1, a2)):
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)


def test_ds_combine_commutative_and_associative():
    a1, a2, a3 = (_random_alpha(10, 5, s) for s in (2, 3, 4))
    for x, y in zip(ds_combine(a1, a2), ds_combine(a2, a1)):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=0)
    left = ds_combine(ds_combine(a1, a2)[0], a3)
    right = ds_combine(a1, ds_combine(a2, a3)[0])
    many = ds_combine_many([a1, a2, a3])
    for x, y, z in zip(left, right, many):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(x, z, rtol=1e-10, atol=1e-12)


def test_ds_combine_vacuous_identity_and_sum_to_one():
    """A vacuous opinion (alpha = 1: b = 0, u = 1) leaves the other unchanged; b + u = 1."""
    a = _random_alpha(8, 6, 5)
    alpha, b, u = ds_combine(a, torch.ones_like(a))
    torch.testing.assert_close(alpha, a)
    torch.testing.assert_close(b, opinion(a)[0])
    torch.testing.assert_close(u, opinion(a)[1])
    for alphas in (
        [a, _random_alpha(8, 6, 6)],
        [a, _random_alpha(8, 6, 7), _random_alpha(8, 6, 8)],
    ):
        _, b, u = ds_combine_many(alphas)
        torch.testing.assert_close(b.sum(-1) + u, torch.ones(8, dtype=D64))


def test_ds_combine_finite_at_total_conflict():
    """Two nearly certain views on different candidates (u ~ 3e-30, C -> 1): the printed rule
    divides by 1 - C = 0 in float32 and returns inf/NaN; the evidence form gives the limit
    b = [1/2, 1/2, 0], u ~ 0, with finite gradients."""
    a1 = torch.tensor([[1e30, 1.0, 1.0]], requires_grad=True)
    a2 = torch.tensor([[1.0, 1e30, 1.0]], requires_grad=True)
    literal = tmc_literal(a1.detach(), a2.detach())
    assert not all(torch.isfinite(t).all() for t in literal)  # why the rewrite is needed
    alpha, b, u = ds_combine(a1, a2)
    assert all(torch.isfinite(t).all() for t in (alpha, b, u))
    torch.testing.assert_close(b, torch.tensor([[0.5, 0.5, 0.0]]))
    assert 0.0 <= u.item() < 1e-29
    (alpha.sum() + b.sum() + u.sum()).backward()
    assert torch.isfinite(a1.grad).all() and torch.isfinite(a2.grad).all()


def test_more_agreement_lower_uncertainty():
    """alpha1 = [5,1,1] with an agreeing [5,1,1] gives e = 4 + 4 + 16/3 on candidate 0,
    S = 49/3, u = 9/49; with a conflicting [1,5,1] e = [4, 4, 0], S = 11, u = 3/11 > 9/49.
    Fusion never raises u above either input."""
    a1 = torch.tensor([[5.0, 1.0, 1.0]], dtype=D64)
    agree = ds_combine(a1, a1.clone())[2]
    conflict = ds_combine(a1, torch.tensor([[1.0, 5.0, 1.0]], dtype=D64))[2]
    assert agree.item() == pytest.approx(9 / 49)
    assert conflict.item() == pytest.approx(3 / 11)
    assert agree.item() < conflict.item() < opinion(a1)[1].item()


def test_ds_combine_many_single_view_and_cap():
    a = _random_alpha(4, 3, 9)
    alpha, _, _ = ds_combine_many([a])
    assert alpha is a
    big = torch.full((2, 3), 1e20)
    capped, b, _u = ds_combine_many([big, big], max_log_strength=30.0)
    assert capped.sum(-1).max().item() == pytest.approx(math.exp(30.0) + 3, rel=1e-5)
    torch.testing.assert_close(b, torch.full((2, 3), 1 / 3))
    with pytest.raises(ValueError, match="same shape"):
        ds_combine(a, a[:, :2])
    with pytest.raises(ValueError, match="at least one"):
        ds_combine_many([])


# ------------------------------------------------------------------------------- EDL loss


def test_edl_loss_hand_value():
    """alpha = [2, 1], y = [1, 0]: S = 3, p = [2/3, 1/3]; LS = (1/3)^2 + (1/3)^2 +
    (2*1 + 1*2) / (9 * 4) = 2/9 + 1/9 = 1/3. alpha_tilde = y + (1 - y) alpha = [1, 1], so
    KL = 0 and the loss is 1/3 for any kl_weight."""
    loss = edl_loss(torch.tensor([[2.0, 1.0]]), torch.tensor([[1.0, 0.0]]), kl_weight=0.1)
    assert loss.shape == (1,)
    assert loss.item() == pytest.approx(1 / 3, rel=1e-6)


def test_least_squares_term_matches_monte_carlo():
    """LS term = E_{p ~ Dir(alpha)} ||y - p||^2. 400k samples (seed 0): each ||y-p||^2 is in
    [0, 2], so the MC standard error is < 2/sqrt(4e5) = 3.2e-3; tolerance 1e-2."""
    alpha = torch.tensor([[3.0, 1.5, 2.0, 1.2], [1.1, 6.0, 1.3, 2.5]], dtype=D64)
    target = torch.tensor([[1.0, 0, 0, 0], [0, 0.7, 0, 0]], dtype=D64)
    ls, _ = edl_terms(alpha, target)
    torch.manual_seed(0)
    p = Dirichlet(alpha).sample((400_000,))
    mc = ((target - p) ** 2).sum(-1).mean(0)
    torch.testing.assert_close(ls, mc, atol=1e-2, rtol=0)


def test_kl_matches_monte_carlo_and_closed_form():
    """KL(Dir(a)||Dir(1)) = E_{p~Dir(a)}[log Dir(p; a) - log Dir(p; 1)], 400k samples (seed
    1), tolerance 5 standard errors; and equal to torch's closed form to 1e-9."""
    alpha = torch.tensor([[3.0, 1.5, 2.0, 1.2], [1.1, 6.0, 1.3, 2.5]], dtype=D64)
    zero = torch.zeros_like(alpha)  # y = 0: alpha_tilde = alpha
    _, kl = edl_terms(alpha, zero)
    torch.manual_seed(1)
    q, p0 = Dirichlet(alpha), Dirichlet(torch.ones_like(alpha))
    x = q.sample((400_000,))
    ratio = q.log_prob(x) - p0.log_prob(x)
    se = ratio.std(0) / math.sqrt(x.shape[0])
    assert ((kl - ratio.mean(0)).abs() < 5 * se).all()
    torch.testing.assert_close(kl, kl_divergence(q, p0), rtol=1e-9, atol=1e-9)


def test_kl_zero_at_uniform_and_target_removed():
    """alpha = 1 gives KL 0; a one-hot target sets alpha_tilde = 1 on the target entry, so a
    huge target evidence with non-targets at 1 has KL 0 too."""
    _, kl = edl_terms(torch.ones(2, 5), torch.zeros(2, 5))
    assert kl.abs().max().item() < 1e-6
    alpha = torch.tensor([[1e6, 1.0, 1.0]])
    _, kl = edl_terms(alpha, torch.tensor([[1.0, 0.0, 0.0]]))
    assert abs(kl.item()) < 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kl_stable_for_huge_alpha(dtype):
    """alpha = [A, 1, 1, 1]: KL = lgamma(A+3) - lgamma(A) - lgamma(4) + (A-1)(psi(A) -
    psi(A+3)) -> 3 (ln A - 1) - ln 6 + O(1/A). At A = 1e20 the textbook form has lost every
    digit (terms ~1e21); the rewritten form matches the asymptote to 1e-6."""
    A = 1e20
    _, kl = edl_terms(torch.tensor([[A, 1.0, 1.0, 1.0]], dtype=dtype), torch.zeros(1, 4))
    expected = 3 * (math.log(A) - 1) - math.log(6)
    assert kl.item() == pytest.approx(expected, rel=1e-6)


# --------------------------------------------------------------------- trusted margin (Eq. 17)


def test_trusted_margin_factor_properties():
    """f_C = 1/(1 + (u/(1-u))^10): at u = 1/4, (1/3)^10 = 1/59049, f_C = 59049/59050 and
    f_N = 1/59050. f_C + f_N = 1, f_C decreasing, f_N increasing, both 0.5 at u = 0.5 and
    in [0, 1] including u in {0, 1} (limits 1 and 0), with finite gradients there."""
    u = torch.cat([torch.tensor([0.0]), torch.linspace(1e-4, 1 - 1e-4, 999), torch.tensor([1.0])])
    u.requires_grad_(True)
    fc = trusted_margin_factor(u, 10.0, clean=True)
    fn = trusted_margin_factor(u, 10.0, clean=False)
    assert torch.isfinite(fc).all() and torch.isfinite(fn).all()
    assert (fc >= 0).all() and (fc <= 1).all() and (fn >= 0).all() and (fn <= 1).all()
    assert (fc[1:] <= fc[:-1]).all() and (fn[1:] >= fn[:-1]).all()
    assert fc[0].item() == 1.0 and fc[-1].item() == 0.0
    assert fn[0].item() == 0.0 and fn[-1].item() == 1.0
    torch.testing.assert_close(fc + fn, torch.ones_like(fc))
    (fc.sum() + fn.sum()).backward()
    assert torch.isfinite(u.grad).all()
    half = torch.tensor([0.5])
    assert trusted_margin_factor(half, 10.0, True).item() == pytest.approx(0.5)
    assert trusted_margin_factor(half, 10.0, False).item() == pytest.approx(0.5)
    quarter = torch.tensor([0.25], dtype=D64)
    assert trusted_margin_factor(quarter, 10.0, True).item() == pytest.approx(59049 / 59050)
    assert trusted_margin_factor(quarter, 10.0, False).item() == pytest.approx(1 / 59050)


# ------------------------------------------------------------- tanh evidence, log-space DST


def test_tanh_evidence_hand_values_and_bounds():
    """DECL's exp(tanh(r)/tau): 1 at r = 0, e^{+-10} at r -> +-inf (tau 0.1), finite gradient;
    its infimum is the u_bar normaliser's minimum; 'subtract' is rejected for it."""
    raw = torch.tensor([0.0, 0.5, -1e4, 1e4], requires_grad=True)
    e = evidence(raw, function="tanh")
    expected = [1.0, math.exp(math.tanh(0.5) / 0.1), math.exp(-10.0), math.exp(10.0)]
    assert e.tolist() == pytest.approx(expected, rel=1e-5)
    e.sum().backward()
    assert torch.isfinite(raw.grad).all()
    assert min_log_evidence(0.1, "keep", "tanh") == -10.0
    assert min_log_evidence(0.1, "keep", "softplus") == 0.0
    assert min_log_evidence(0.1, "subtract", "softplus") == -math.inf
    with pytest.raises(ValueError, match="softplus evidence only"):
        evidence(raw, function="tanh", floor="subtract")
    with pytest.raises(ValueError, match="evidence function"):
        evidence(raw, function="relu")


def test_log_ds_combine_many_equals_evidence_form():
    """log-space fusion == log of ds_combine_many's evidence for W = 1, 2, 3, and stays exact
    where exp overflows float64 (log evidence 800)."""
    torch.manual_seed(0)
    for W in (1, 2, 3):
        log_e = torch.randn(W, 4, 5, dtype=D64) * 3
        alpha, _, _ = ds_combine_many(log_e.exp() + 1.0)
        torch.testing.assert_close(log_ds_combine_many(log_e), torch.log(alpha - 1.0))
    big = torch.tensor([[[800.0, 0.0]], [[800.0, -math.inf]]], dtype=D64)
    fused = log_ds_combine_many(big)
    assert fused[0, 0].item() == pytest.approx(1600.0 - math.log(2.0))
    assert fused[0, 1].item() == pytest.approx(0.0)
