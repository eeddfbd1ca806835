"""Tests of ugncl.methods.ugncl.losses: VSE++ hinge, soft/trusted margins, lambda schedule, TRL,
objectives."""

from __future__ import annotations

import math

import pytest
import torch

from ugncl.methods.ugncl.division import CLEAN, HARD_CLEAN, HARD_NOISY, NOISY, divide_batch
from ugncl.methods.ugncl.evidential import edl_loss, evidence, trusted_margin_factor
from ugncl.methods.ugncl.losses import (
    edl_targets,
    evidential_loss,
    lambda_schedule,
    soft_margin,
    triplet_objective,
    trusted_margins,
    trusted_robust_loss,
    ugncl_objective,
    vse_hinge,
    warmup_objective,
)

# ------------------------------------------------------------------------------ VSE hinge

S3 = torch.tensor([[0.9, 0.5, 0.8], [0.7, 0.6, 0.1], [0.2, 0.4, 0.5]])


def test_vse_hinge_hand_values():
    """Hinge [m + s_neg - s_pos]+ per (anchor, negative), S3 above.
    margin 0.2. Image rows: i=0 captions 1,2: [0.2+0.5-0.9]+ = 0, 0.2+0.8-0.9 = 0.1;
    i=1: 0.2+0.7-0.6 = 0.3, 0; i=2: 0, 0.2+0.4-0.5 = 0.1. Caption columns: j=0: 0, 0;
    j=1: 0.2+0.5-0.6 = 0.1, 0; j=2: 0.2+0.8-0.5 = 0.5, 0. Each anchor has at most one
    violation, so hardest = all = 0.1+0.3+0.1 + 0.1+0.5 = 1.1.
    margin 0.5. Rows: i=0 [0.1, 0.4], i=1 [0.6, 0], i=2 [0.2, 0.4]: hardest 1.4, all 1.7.
    Columns: j=0 [0.3, 0], j=1 [0.4, 0.3], j=2 [0.8, 0.1]: hardest 1.5, all 1.9.
    Totals: hardest 2.9, all negatives 3.6."""
    assert vse_hinge(S3, 0.2).item() == pytest.approx(1.1, abs=1e-6)
    assert vse_hinge(S3, 0.2, max_violation=False).item() == pytest.approx(1.1, abs=1e-6)
    assert vse_hinge(S3, 0.5).item() == pytest.approx(2.9, abs=1e-6)
    assert vse_hinge(S3, 0.5, max_violation=False).item() == pytest.approx(3.6, abs=1e-6)
    with pytest.raises(ValueError, match="square"):
        vse_hinge(torch.zeros(2, 3))


# -------------------------------------------------------------------------- margins, lambda


def test_soft_margin_values():
    """gamma (m^y - 1)/(m - 1): y=0 -> 0, y=1 -> gamma, y=0.5 -> 0.2 (sqrt(10) - 1)/9."""
    y = torch.tensor([0.0, 0.5, 1.0])
    expected = [0.0, 0.2 * (math.sqrt(10) - 1) / 9, 0.2]
    assert soft_margin(y).tolist() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="m must"):
        soft_margin(y, m=1.0)


def test_lambda_schedule_values_and_clipping():
    """K=128: step 0 -> 128 clipped to 127; step 400 -> 128 - 10 = 118; step 10^4 -> theta 5.
    A short batch never gets more than K - 1 negatives (K = 4, theta = 5 -> 3; K = 1 -> 1)."""
    assert lambda_schedule(128, 0) == 127
    assert lambda_schedule(128, 400) == 118
    assert lambda_schedule(128, 10_000) == 5
    assert lambda_schedule(4, 10_000) == 3
    assert lambda_schedule(1, 0) == 1
    for K in range(1, 12):
        for step in range(0, 6000, 37):
            assert 1 <= lambda_schedule(K, step) <= max(K - 1, 1)


def test_trusted_margins_per_set():
    """CLEAN -> 0.2; NOISY -> 0; HARD_CLEAN y=1, u_bar=0.5 -> f_C = 0.5, 0.5 * 0.2 = 0.1;
    HARD_NOISY y=0.5, u_bar=0.9 -> f_N(0.9) * 0.2 (sqrt(10) - 1)/9, f_N = 1/(1 + (1/9)^10)."""
    sets = torch.tensor([CLEAN, NOISY, HARD_CLEAN, HARD_NOISY])
    y = torch.tensor([1.0, 0.0, 1.0, 0.5])
    u_bar = torch.tensor([0.1, 0.1, 0.5, 0.9])
    m = trusted_margins(sets, y, u_bar)
    f_n = 1 / (1 + (1 / 9) ** 10)
    expected = [0.2, 0.0, 0.1, f_n * 0.2 * (math.sqrt(10) - 1) / 9]
    assert m.tolist() == pytest.approx(expected, rel=1e-6)


# ---------------------------------------------------------------------------------- TRL

# Asymmetric scores: S[i, j] = image i, caption j.
S_TRL = torch.tensor([[0.5, 0.45, 0.1], [0.55, 0.6, 0.2], [0.3, 0.1, 0.2]])
M_TRL = torch.tensor([0.1, 0.3, 0.5])
SETS_TRL = torch.tensor([CLEAN, HARD_NOISY, NOISY])


def test_trl_hand_example_uses_anchor_margin_both_directions():
    """Margins m = [0.1, 0.3, 0.5]; pair 0 CLEAN, pair 1 hard, pair 2 NOISY (no term).
    Anchor 0 (m=0.1), image row 0: [0.1+0.45-0.5]+ = 0.05, [0.1+0.1-0.5]+ = 0 -> hardest 0.05;
    caption column 0 (diag 0.5): images 1, 2: [0.1+0.55-0.5]+ = 0.15, 0 -> hardest 0.15.
    Anchor 1 (m=0.3), image row 1 (diag 0.6): captions 0, 2: 0.3+0.55-0.6 = 0.25, 0;
    caption column 1 (diag 0.6): images 0, 2: 0.3+0.45-0.6 = 0.15, 0.
    lam = 2: 0.05 + 0.15 + (0.25 + 0)/2 + (0.15 + 0)/2 = 0.4.
    lam = 1: 0.05 + 0.15 + 0.25 + 0.15 = 0.6.
    Indexing the text-to-image margin by the image row (released code) would give caption 0:
    m_1 + 0.55 - 0.5 = 0.35 instead of 0.15, so the total could not be 0.4."""
    assert trusted_robust_loss(S_TRL, M_TRL, SETS_TRL, lam=2).item() == pytest.approx(0.4)
    assert trusted_robust_loss(S_TRL, M_TRL, SETS_TRL, lam=1).item() == pytest.approx(0.6)
    # lam above K - 1 is clipped to the available negatives.
    assert trusted_robust_loss(S_TRL, M_TRL, SETS_TRL, lam=100).item() == pytest.approx(0.4)

    # The buggy orientation, computed independently, differs: the test can tell them apart.
    diag = S_TRL.diagonal()
    rows_margin_t2i = (M_TRL[:, None] + S_TRL - diag[None, :]).clamp_min(0)
    rows_margin_t2i.fill_diagonal_(0)
    buggy_caption0 = rows_margin_t2i[:, 0].max().item()
    assert buggy_caption0 == pytest.approx(0.35)


def test_trl_noisy_anchors_contribute_nothing():
    scores = S_TRL.clone().requires_grad_(True)
    sets = torch.full((3,), NOISY)
    loss = trusted_robust_loss(scores, M_TRL, sets, lam=2)
    assert loss.item() == 0.0
    loss.backward()
    assert (scores.grad == 0).all()
    # Hard-clean and hard-noisy anchors are treated alike by the loss (margins differ).
    a = trusted_robust_loss(S_TRL, M_TRL, torch.tensor([CLEAN, HARD_CLEAN, NOISY]), 2)
    b = trusted_robust_loss(S_TRL, M_TRL, torch.tensor([CLEAN, HARD_NOISY, NOISY]), 2)
    assert a.item() == b.item()


def test_trl_without_hard_noisy_hinge_drops_exactly_those_anchors():
    """hard_noisy=False: the hand example's hard-noisy anchor 1 (0.125 + 0.075 = 0.2 at
    lam = 2) leaves the loss and gets no gradient; the CLEAN anchor's 0.05 + 0.15 stays."""
    scores = S_TRL.clone().requires_grad_(True)
    loss = trusted_robust_loss(scores, M_TRL, SETS_TRL, lam=2, hard_noisy=False)
    assert loss.item() == pytest.approx(0.2)
    loss.backward()
    # Pair 1 appears only as anchor 1's diagonal and as a negative of the clean anchor 0
    # (whose hardest negatives are S[0, 1] and S[1, 0]); its diagonal S[1, 1] gets nothing.
    assert scores.grad[1, 1].item() == 0.0
    assert scores.grad[0, 0].item() != 0.0
    # Hard-clean anchors keep their hinge.
    kept = trusted_robust_loss(S_TRL, M_TRL, torch.tensor([CLEAN, HARD_CLEAN, NOISY]), 2,
                               hard_noisy=False)  # fmt: skip
    assert kept.item() == pytest.approx(0.4)


# ---------------------------------------------------------------------------- objectives


def _extreme_raw(W: int, K: int, seed: int) -> torch.Tensor:
    """Raw scores spanning [-1e4, 1e4] plus a band of moderate values."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.rand(W, K, K, generator=g) * 2e4 - 1e4
    raw[:, :, : K // 2] = torch.randn(W, K, K // 2, generator=g) * 3
    raw[:, 0, :] = 1e4
    raw[:, :, 1] = -1e4
    return raw


@pytest.mark.parametrize("evidential", ["fused", "per_view"])
@pytest.mark.parametrize("W", [1, 2, 3])
def test_objectives_finite_gradients_for_extreme_scores(W, evidential):
    K = 6
    raw = _extreme_raw(W, K, seed=W).requires_grad_(True)
    sets = torch.tensor([CLEAN, NOISY, HARD_CLEAN, HARD_NOISY, CLEAN, HARD_CLEAN])
    soft = torch.tensor([1.0, 0.0, 0.7, 0.2, 1.0, 0.9])
    u_bar = torch.tensor([0.1, 0.2, 0.6, 1.0, 0.0, 0.5])
    out = ugncl_objective(
        raw, sets=sets, soft_label=soft, u_bar=u_bar, lam=3, evidential=evidential
    )
    warm = warmup_objective(raw, lam=3, evidential=evidential)
    for terms in (out, warm):
        assert {"loss_edl", "loss_trl"} <= set(terms)
        assert all(torch.isfinite(v).all() for v in terms.values())
        total = sum(v for k, v in terms.items() if k.startswith("loss"))
        (grad,) = torch.autograd.grad(total, raw)
        assert torch.isfinite(grad).all()
        assert terms["edl_kl"].item() >= 0  # KL stays non-negative at extreme evidence
        assert not any(v.requires_grad for k, v in terms.items() if not k.startswith("loss"))


def test_ugncl_objective_decomposes_into_documented_terms():
    """loss_trl = xi2 * mean over views of TRL(tanh(raw_w)); per_view loss_edl = mean over
    views of [mean_rows edl(e_w + 1) + mean_rows edl(e_w^T + 1)] with target diag(y)."""
    torch.manual_seed(0)
    W, K = 2, 5
    raw = torch.randn(W, K, K)
    div = divide_batch(raw)
    kw = dict(sets=div.sets, soft_label=div.soft_label, u_bar=div.u_bar, lam=2)
    out = ugncl_objective(raw, trl_weight=0.8, evidential="per_view", **kw)
    margins = trusted_margins(div.sets, div.soft_label, div.u_bar)
    trl = torch.stack([trusted_robust_loss(torch.tanh(r), margins, div.sets, 2) for r in raw])
    assert out["loss_trl"].item() == pytest.approx(0.8 * trl.mean().item(), rel=1e-6)
    e = evidence(raw)
    target = torch.diag(div.soft_label)
    per_view = [
        edl_loss(e[w] + 1, target, 0.1).mean() + edl_loss(e[w].t() + 1, target, 0.1).mean()
        for w in range(W)
    ]
    assert out["loss_edl"].item() == pytest.approx(torch.stack(per_view).mean().item(), rel=1e-5)
    fused = ugncl_objective(raw, evidential="fused", **kw)
    assert fused["loss_edl"].item() != pytest.approx(out["loss_edl"].item(), rel=1e-3)
    # With one view, fusing is the identity.
    one = {
        k: ugncl_objective(raw[:1], evidential=k, **kw)["loss_edl"] for k in ("fused", "per_view")
    }
    assert one["fused"].item() == pytest.approx(one["per_view"].item(), rel=1e-6)


@pytest.mark.parametrize("evidential", ["fused", "per_view"])
def test_set_targets_push_hard_noisy_pairs_down_where_soft_labels_pull_them_up(evidential):
    """In the regime of every learned division (all pairs hard, u ~ 1: tanh evidence,
    xi1 = 0.1, scores near 0), the paper's soft target y = 0.45 still raises a hard-noisy
    pair's diagonal, more than half as hard as y = 0.55 raises a hard-clean one;
    ``hard_target: set`` stops pulling the hard-noisy diagonal up (target 0 only lowers a
    diagonal that stands above its row) and raises the hard-clean one harder. The margins
    keep y."""
    torch.manual_seed(5)
    W, K = 2, 8
    raw = (torch.randn(W, K, K) * 0.1).requires_grad_(True)
    sets = torch.tensor([HARD_CLEAN, HARD_NOISY] * (K // 2))
    soft = torch.tensor([0.55, 0.45] * (K // 2))
    kw = dict(
        sets=sets, soft_label=soft, u_bar=torch.ones(K), lam=3, evidential=evidential,
        function="tanh", kl_weight=0.1,
    )  # fmt: skip
    diag = torch.arange(K)
    grads, margins = {}, {}
    for target in ("soft", "set"):
        out = ugncl_objective(raw, hard_target=target, **kw)
        (grad,) = torch.autograd.grad(out["loss_edl"], raw)
        grads[target] = grad[:, diag, diag]  # (W, K): d L_e / d raw_ii
        margins[target] = out["margin_mean"].item()
    hc, hn = sets == HARD_CLEAN, sets == HARD_NOISY
    assert (grads["soft"][:, hn] < 0).all()  # the paper's target pulls a hard-noisy pair up
    assert grads["soft"][:, hn].mean() < 0.5 * grads["soft"][:, hc].mean()
    assert (grads["set"][:, hn] > grads["soft"][:, hn]).all()
    assert grads["set"][:, hn].mean().abs() < 0.25 * grads["soft"][:, hn].mean().abs()
    assert (grads["set"][:, hc] < grads["soft"][:, hc]).all()  # and hard-clean up harder
    assert margins["soft"] == margins["set"]
    assert edl_targets(sets, soft, "set").tolist() == [1.0, 0.0] * (K // 2)
    assert torch.equal(edl_targets(sets, soft, "soft"), soft)
    determined = torch.tensor([CLEAN, NOISY])
    assert edl_targets(determined, torch.tensor([1.0, 0.0]), "set").tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="hard_target"):
        edl_targets(sets, soft, "binary")


@pytest.mark.parametrize("evidential", ["fused", "per_view"])
def test_noisy_edl_switch_leaves_noisy_queries_out_of_the_evidential_loss(evidential):
    """noisy_edl=False: a pair divided noisy gets no L_e gradient on its own score (its
    diagonal sits only in its own row and column); with noisy_edl=True (paper Eq. 15, default)
    its target (0 or the soft label) moves it. Weights scale the per-query terms, summed over
    K."""
    torch.manual_seed(3)
    W, K = 2, 6
    raw = (torch.randn(W, K, K) * 0.5).requires_grad_(True)
    sets = torch.tensor([CLEAN, NOISY, HARD_CLEAN, HARD_NOISY, CLEAN, HARD_CLEAN])
    soft = torch.tensor([1.0, 0.0, 0.7, 0.2, 1.0, 0.9])
    kw = dict(sets=sets, soft_label=soft, u_bar=torch.ones(K), lam=3, evidential=evidential)
    noisy = (sets == NOISY) | (sets == HARD_NOISY)
    diag = torch.arange(K)
    for paper in (True, False):
        out = ugncl_objective(raw, noisy_edl=paper, **kw)
        (grad,) = torch.autograd.grad(out["loss_edl"], raw)
        g = grad[:, diag, diag]  # (W, K): d L_e / d raw_ii
        if paper:
            assert (g[:, noisy] != 0).all()
        else:
            assert (g[:, noisy] == 0).all()
        assert (g[:, ~noisy] < 0).all()  # clean targets raise their diagonals either way
    kept_weight = (~noisy).float()
    kept = evidential_loss(raw, soft, evidential=evidential, query_weight=kept_weight)
    ones = evidential_loss(raw, soft, evidential=evidential, query_weight=torch.ones(K))
    plain = evidential_loss(raw, soft, evidential=evidential)
    assert ones["loss"].item() == pytest.approx(plain["loss"].item(), rel=1e-6)
    half = evidential_loss(raw, soft, evidential=evidential, query_weight=0.5 * kept_weight)
    assert half["loss"].item() == pytest.approx(0.5 * kept["loss"].item(), rel=1e-6)
    with pytest.raises(ValueError, match="query_weight"):
        evidential_loss(raw, soft, query_weight=torch.ones(K + 1))


def test_evidential_loss_terms_and_targets():
    """ls + xi1 * kl == loss; noisy targets (y = 0) push all evidence of the row down, so the
    loss with y = 0 exceeds the loss with y = 1 when the diagonal dominates."""
    raw = torch.full((1, 3, 3), -3.0)
    raw[0, torch.arange(3), torch.arange(3)] = 1.0
    clean = evidential_loss(raw, torch.ones(3), kl_weight=0.1)
    noisy = evidential_loss(raw, torch.zeros(3), kl_weight=0.1)
    assert clean["loss"].item() == pytest.approx((clean["ls"] + 0.1 * clean["kl"]).item())
    assert noisy["loss"].item() > clean["loss"].item()
    with pytest.raises(ValueError, match="evidential"):
        evidential_loss(raw, torch.ones(3), evidential="mean")


def test_warmup_trl_equals_slow_reference():
    """Warm-up hinge: every pair is an anchor with margin gamma, mean of the lam hardest
    negatives per direction, summed over anchors, on tanh(raw), averaged over views."""
    torch.manual_seed(3)
    W, K, lam, gamma = 2, 5, 2, 0.2
    raw = torch.randn(W, K, K)
    out = warmup_objective(raw, lam=lam, trl_weight=1.0, gamma=gamma)
    totals = []
    for w in range(W):
        s = torch.tanh(raw[w]).tolist()
        total = 0.0
        for k in range(K):
            i2t = sorted(max(0.0, gamma + s[k][j] - s[k][k]) for j in range(K) if j != k)
            t2i = sorted(max(0.0, gamma + s[i][k] - s[k][k]) for i in range(K) if i != k)
            total += sum(i2t[-lam:]) / lam + sum(t2i[-lam:]) / lam
        totals.append(total)
    assert out["loss_trl"].item() == pytest.approx(sum(totals) / W, rel=1e-5)


def test_triplet_objective_is_view_mean_of_sigmoid_hinge():
    torch.manual_seed(4)
    raw = torch.randn(2, 4, 4)
    out = triplet_objective(raw, margin=0.2)
    expected = (vse_hinge(torch.sigmoid(raw[0])) + vse_hinge(torch.sigmoid(raw[1]))) / 2
    assert set(out) == {"loss_triplet"}
    assert out["loss_triplet"].item() == pytest.approx(expected.item(), rel=1e-6)


def test_objective_shape_errors():
    raw = torch.zeros(1, 3, 3)
    with pytest.raises(ValueError, match=r"\(W, K, K\)"):
        warmup_objective(torch.zeros(3, 3), lam=1)
    with pytest.raises(ValueError, match="sets"):
        ugncl_objective(
            raw, sets=torch.zeros(2, dtype=torch.long), soft_label=torch.ones(3),
            u_bar=torch.ones(3), lam=1,
        )  # fmt: skip
    assert trusted_margin_factor(torch.tensor([0.3]), 0.0, True).item() == 0.5


# --------------------------------------------------- fused loss keeps its gradient


@pytest.mark.parametrize(
    ("function", "diag"), [("softplus", 4.0), ("softplus", 6.0), ("tanh", 1.0), ("tanh", 2.0)]
)
def test_fused_loss_pushes_down_a_confident_noisy_pair(function, diag):
    """K = 32, W = 2, every score 0 but the noisy pair 0's diagonal (target 0). The fused
    loss must push that score down about as hard as the released per-view loss (1.9 summed
    over views for softplus). The former strength cap made ``alpha - 1 = exp(cap) * b`` and
    the gradient 9e-6 (raw 4) and 3e-14 (raw 6) with softplus evidence. (tanh evidence
    saturates by itself for raw >~ 3, hence its smaller test scores.)"""
    K, W = 32, 2
    raw = torch.zeros(W, K, K)
    raw[:, 0, 0] = diag
    raw.requires_grad_(True)
    labels = torch.ones(K)
    labels[0] = 0.0
    grads = {}
    for mode in ("fused", "per_view"):
        loss = evidential_loss(raw, labels, function=function, evidential=mode)["loss"]
        (g,) = torch.autograd.grad(loss, raw)
        grads[mode] = g[:, 0, 0].sum().item()
    assert grads["per_view"] > 0.05
    assert grads["fused"] > 0.1 * grads["per_view"]


# ------------------------------------------------------------------------- score centring


def _offset_gradient(centring: str, seed: int = 0) -> tuple[float, float]:
    """d L / d c of the warm-up objective at raw + c (c a shared offset), at a random start
    (raw ~ N(0, 0.1), K = 32, W = 2, tanh evidence, xi1 = 0.1): returns (gradient, loss)."""
    g = torch.Generator().manual_seed(seed)
    raw = 0.1 * torch.randn(2, 32, 32, generator=g, dtype=torch.float64)
    c = torch.zeros((), dtype=torch.float64, requires_grad=True)
    out = warmup_objective(raw + c, lam=31, tau=0.1, function="tanh", centring=centring)
    loss = out["loss_edl"] + out["loss_trl"]
    loss.backward()
    return c.grad.item(), loss.item()


def test_uncentred_kl_lowers_every_score_through_the_shared_offset():
    """Mechanism: at a random start the objective falls when every score
    falls together (positive d L / d offset), which is how the KL term drives every evidence,
    the diagonal's included, to exp(-1/tau). Centred, the offset has no gradient at all."""
    grad_none, _ = _offset_gradient("none")
    grad_batch, _ = _offset_gradient("batch")
    assert grad_none > 0.1
    assert abs(grad_batch) < 1e-10


@pytest.mark.parametrize("objective", ["warmup", "ugncl"])
def test_centred_objectives_ignore_a_per_view_shift(objective):
    """Adding a constant per view leaves the centred objectives unchanged, not the paper's."""
    g = torch.Generator().manual_seed(3)
    raw = torch.randn(2, 6, 6, generator=g, dtype=torch.float64)
    shift = torch.tensor([1.5, -0.7], dtype=torch.float64).view(2, 1, 1)
    sets = torch.tensor([CLEAN, NOISY, HARD_CLEAN, HARD_NOISY, CLEAN, HARD_CLEAN])
    extra = dict(sets=sets, soft_label=torch.rand(6, generator=g).double(),
                 u_bar=torch.rand(6, generator=g).double())  # fmt: skip

    def total(r, centring):
        kw = dict(lam=3, tau=0.1, function="tanh", centring=centring)
        out = (
            warmup_objective(r, **kw)
            if objective == "warmup"
            else ugncl_objective(r, **extra, **kw)
        )
        return (out["loss_edl"] + out["loss_trl"]).item()

    assert total(raw + shift, "batch") == pytest.approx(total(raw, "batch"), rel=1e-12)
    assert total(raw + shift, "none") != pytest.approx(total(raw, "none"), rel=1e-3)


def test_centre_scores_rejects_unknown_mode():
    from ugncl.methods.ugncl.evidential import centre_scores

    with pytest.raises(ValueError, match="centring"):
        centre_scores(torch.zeros(1, 2, 2), "row")


def test_clean_info_nce_is_the_backbones_loss_over_the_kept_pairs_only() -> None:
    """``method.ugncl.clean_infonce``: the InfoNCE of the pairs the division keeps (CLEAN,
    HARD_CLEAN), every caption of the batch a negative; pairs called noisy get no gradient
    through their own row and column's positive, and none kept gives 0."""
    from ugncl.methods.infonce import info_nce_per_sample
    from ugncl.methods.ugncl.method import clean_info_nce

    torch.manual_seed(0)
    logits = (10 * torch.randn(2, 5, 5)).requires_grad_()
    sets = torch.tensor([CLEAN, NOISY, HARD_CLEAN, HARD_NOISY, CLEAN])
    kept = torch.tensor([0, 2, 4])
    expected = torch.stack([info_nce_per_sample(v)[kept].mean() for v in logits]).mean()
    loss = clean_info_nce(logits, sets)
    assert torch.allclose(loss, expected)
    loss.backward()
    # A noisy pair's positive (its diagonal entry) is not pulled up.
    assert logits.grad[:, 1, 1].abs().max() < 1e-6 and logits.grad[:, 0, 0].abs().min() > 0
    none = clean_info_nce(logits.detach(), torch.full((5,), NOISY))
    assert none.item() == 0.0


def test_clean_info_nce_by_soft_label_weighs_each_pair_by_its_weight() -> None:
    """``clean_infonce_weights: soft_label``: each pair's InfoNCE counts by its weight; the
    weights of the division's calls (1 clean, 0 noisy) give the called-clean loss, and soft
    weights give the weighted mean of every pair's InfoNCE."""
    from ugncl.methods.infonce import info_nce_per_sample
    from ugncl.methods.ugncl.method import clean_info_nce

    torch.manual_seed(1)
    logits = 10 * torch.randn(2, 4, 4)
    sets = torch.tensor([CLEAN, NOISY, HARD_CLEAN, HARD_NOISY])
    crisp = torch.tensor([1.0, 0.0, 1.0, 0.0])
    assert torch.allclose(clean_info_nce(logits, sets, crisp), clean_info_nce(logits, sets))
    soft = torch.tensor([1.0, 0.0, 0.7, 0.2])
    expected = torch.stack(
        [(info_nce_per_sample(v) * soft).sum() / soft.sum() for v in logits]
    ).mean()
    assert torch.allclose(clean_info_nce(logits, sets, soft), expected)
    assert not torch.allclose(expected, clean_info_nce(logits, sets))


def test_clean_info_nce_without_kept_pairs_has_a_zero_gradient_at_any_weight() -> None:
    """A batch whose pairs are all called noisy: the loss is 0 and so is its gradient, also
    under a large loss weight (the normalised mean's tiny denominator used to overflow the
    backward pass into NaN weights at weight 10)."""
    from ugncl.methods.ugncl.method import clean_info_nce

    logits = (10 * torch.randn(1, 6, 6)).requires_grad_()
    loss = 1e6 * clean_info_nce(logits, torch.full((6,), NOISY))
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(logits.grad, torch.zeros_like(logits))


def test_pair_soft_labels_rank_a_pair_by_how_much_of_its_evidence_backs_its_own_caption() -> None:
    """``clean_infonce_weights: soft_label`` weighs each pair by Eq. 11's soft label on the
    batch's own scores: a pair whose caption scores far above its rivals weighs more than
    one whose caption scores below a rival, whatever the division called them."""
    from ugncl.methods.ugncl.method import UGNCLMethod

    method = UGNCLMethod(clean_infonce=1.0, clean_infonce_weights="soft_label")
    raw = torch.full((1, 4, 4), 0.1)
    raw[0, 0, 0] = 0.9  # pair 0: its own caption far above the rest
    raw[0, 1, 1], raw[0, 1, 2] = 0.2, 0.6  # pair 1: a rival caption above its own
    raw[0, 2, 2] = raw[0, 3, 3] = 0.5
    weights = method.pair_soft_labels(raw, lam=3)
    assert weights.shape == (4,) and bool(((weights >= 0) & (weights <= 1)).all())
    assert weights[0] > weights[2] > weights[1]


def test_soft_label_weights_without_the_infonce_term_are_refused() -> None:
    """``clean_infonce_weights: soft_label`` with ``clean_infonce: 0`` would weigh a term that
    is off: one error naming both keys, not a silent no-op."""
    from ugncl.core.errors import ConfigError
    from ugncl.methods.ugncl.method import UGNCLConfig

    with pytest.raises(ConfigError, match="clean_infonce > 0"):
        UGNCLConfig(clean_infonce_weights="soft_label").validate()
    UGNCLConfig(clean_infonce=10.0, clean_infonce_weights="soft_label").validate()
