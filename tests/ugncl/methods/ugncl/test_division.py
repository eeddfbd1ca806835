"""Tests of ugncl.methods.ugncl.division: normalised uncertainty, four-way division, accumulation,
quality."""

from __future__ import annotations

import io
import itertools
import math

import numpy as np
import pytest
import torch

from ugncl.methods.ugncl.division import (
    CLEAN,
    HARD_CLEAN,
    HARD_NOISY,
    NOISY,
    UNVISITED,
    DivisionAccumulator,
    DivisionResult,
    batch_opinions,
    divide_batch,
    division_quality,
    floor_uncertainty,
)

FLOOR = -1e4  # softplus(-1e4) = 0 in float32: evidence exactly 1 ("keep") or 0 ("subtract")
TAU = 0.1


def raw_for_evidence(e: float) -> float:
    """Inverse of e = exp(softplus(r)/tau): r = log(expm1(tau * log e))."""
    return math.log(math.expm1(TAU * math.log(e)))


@pytest.mark.parametrize("K", [2, 4, 7])
def test_floor_uncertainty_closed_forms(K):
    """All bidirectional floor evidence is 1 + 1 = 2 ("keep"). Per view alpha = 3, S = 3K,
    u = 1/3. DST in evidence form (e <- e + e_w + e e_w / K) and 1/u = 1 + sum(e)/K = 1 + e
    give W=2: e = 4 + 4/K, u = 1/(5 + 4/K); W=3: e = 6 + 12/K + 8/K^2. "subtract": e = 0,
    u = 1 for every W."""
    assert floor_uncertainty(K, 1).item() == pytest.approx(1 / 3)
    assert floor_uncertainty(K, 2).item() == pytest.approx(1 / (5 + 4 / K))
    assert floor_uncertainty(K, 3).item() == pytest.approx(1 / (7 + 12 / K + 8 / K**2))
    for W in (1, 2, 3):
        assert floor_uncertainty(K, W, "subtract").item() == 1.0


@pytest.mark.parametrize("floor", ["keep", "subtract"])
@pytest.mark.parametrize("W", [1, 2, 3])
def test_normalised_uncertainty_exactly_one_at_floor(W, floor):
    """Every score at the floor: the same pipeline as u_floor, so u_bar == 1 bit for bit; all
    pairs are hard (u_bar >= p) and, with projected probability 1/K ("keep") or 0 (no
    evidence, "subtract"), hard-noisy."""
    div = divide_batch(torch.full((W, 5, 5), FLOOR), floor=floor)
    assert (div.u_bar == 1.0).all()
    assert (div.sets == HARD_NOISY).all()


@pytest.mark.parametrize("W", [1, 2, 3])
def test_normalised_uncertainty_falls_with_dominant_diagonal(W):
    """Diagonal score s, everything else at the floor: more diagonal evidence lowers u_bar
    strictly; at s = 4 (log e = 40.2) it is below 1e-12 and every pair is determined clean."""
    values = []
    for s in (-2.0, 0.0, 1.0, 2.0, 4.0):
        raw = torch.full((W, 6, 6), FLOOR)
        raw[:, torch.arange(6), torch.arange(6)] = s
        div = divide_batch(raw)
        assert torch.allclose(div.u_bar, div.u_bar[0].expand(6))  # symmetric batch
        values.append(div.u_bar[0].item())
    assert all(a > b for a, b in itertools.pairwise(values))
    assert values[0] <= 1.0 and values[-1] < 1e-12
    assert (div.sets == CLEAN).all() and (div.soft_label == 1.0).all()


def test_u_bar_never_exceeds_one():
    """In evidence form fused 1/u = 1 + sum(e)/K is increasing in every evidence, so any
    batch has u <= u_floor. Random batches, W = 1..3, scores from -6 to 6."""
    g = torch.Generator().manual_seed(0)
    for W in (1, 2, 3):
        raw = torch.randn(20, W, 8, 8, generator=g) * 3 - 3
        for r in raw:
            div = divide_batch(r)
            assert (div.u_bar > 0).all() and (div.u_bar <= 1).all()


def hand_batch() -> torch.Tensor:
    """4 x 4 batch (W = 1) with one pair of each set.

    Evidence matrix e (rows images, columns captions), floor 1 unless listed:
    e[0,0] = exp(30.49) (raw 3), e[1,0] = exp(21.27) (raw 2), e[2,2] = 4.
    Bidirectional evidence e_i[k] = e[i,k] + e[k,i]:
    pair 0: [2 e00, 1 + e10, 2, 2] -> argmax 0, u ~ 1e-13: CLEAN, label 1.
    pair 1: [e10 + 1, 2, 2, 2] -> argmax 0 != 1, u ~ 1e-9: NOISY, label 0.
    pair 2: [2, 2, 8, 2]: sum 14, S = 18, u = 4/18, u_floor = 1/3, u_bar = 2/3 >= 0.5: hard;
            projected = 8/14 = 4/7 > 0.5: HARD_CLEAN, label 4/7.
    pair 3: [2, 2, 2, 2]: u_bar = 1, projected 1/4: HARD_NOISY, label 1/4.
    """
    raw = torch.full((1, 4, 4), FLOOR)
    raw[0, 0, 0] = 3.0
    raw[0, 1, 0] = 2.0
    raw[0, 2, 2] = raw_for_evidence(4.0)
    return raw


def test_divide_hand_built_batch():
    div = divide_batch(hand_batch(), tau=TAU)
    assert div.sets.tolist() == [CLEAN, NOISY, HARD_CLEAN, HARD_NOISY]
    assert div.sets.dtype == torch.long
    assert div.belief_argmax.tolist() == [0, 0, 2, 0]
    assert div.u_bar[0].item() < 1e-9 and div.u_bar[1].item() < 1e-6
    assert div.u_bar[2].item() == pytest.approx(2 / 3, rel=1e-5)
    assert div.u_bar[3].item() == 1.0
    assert div.projected[2].item() == pytest.approx(4 / 7, rel=1e-5)
    assert div.soft_label.tolist() == pytest.approx([1.0, 0.0, 4 / 7, 1 / 4], rel=1e-5)


def test_divide_batch_thresholds_and_no_grad():
    """p = 0.7 > 2/3 makes pair 2 determined (clean, argmax 2); epsilon = 0.6 > 4/7 turns the
    hard-clean pair hard-noisy. The division never tracks gradients."""
    raw = hand_batch().requires_grad_(True)
    assert divide_batch(raw, p=0.7).sets[2].item() == CLEAN
    assert divide_batch(raw, epsilon=0.6).sets[2].item() == HARD_NOISY
    assert not divide_batch(raw).u.requires_grad
    b, u = batch_opinions(hand_batch())
    torch.testing.assert_close(b.sum(-1) + u, torch.ones(4))
    with pytest.raises(ValueError, match=r"\(W, K, K\)"):
        divide_batch(torch.zeros(4, 4))


def test_accumulator_result_lookup_and_state_roundtrip():
    acc = DivisionAccumulator(10)
    div = divide_batch(hand_batch())
    acc.add(torch.tensor([3, 7, 1, 0]), div)
    acc.add(torch.tensor([9, 2, 5, 6]), div)
    res = acc.result()
    expected_sets = np.full(10, UNVISITED, dtype=np.int8)
    expected_sets[[3, 7, 1, 0]] = [0, 1, 2, 3]
    expected_sets[[9, 2, 5, 6]] = [0, 1, 2, 3]
    assert res.sets.dtype == np.int8 and res.u_bar.dtype == np.float32
    np.testing.assert_array_equal(res.sets, expected_sets)
    assert np.isnan(res.u_bar[[4, 8]]).all() and np.isnan(res.soft_label[[4, 8]]).all()
    assert np.bincount(res.sets[res.sets >= 0]).tolist() == [2, 2, 2, 2]
    assert (res.sets == UNVISITED).sum() == 2
    sets, soft, _u_bar = res.lookup(torch.tensor([1, 9]))
    assert sets.tolist() == [HARD_CLEAN, CLEAN] and sets.dtype == torch.long
    assert soft.tolist() == pytest.approx([4 / 7, 1.0], rel=1e-5)
    with pytest.raises(ValueError, match="not covered"):
        res.lookup(torch.tensor([4]))
    buf = io.BytesIO()
    torch.save({"division": res.to_state()}, buf)
    buf.seek(0)
    back = DivisionResult.from_state(torch.load(buf, weights_only=True)["division"])
    for name in ("u", "u_bar", "soft_label", "sets"):
        np.testing.assert_array_equal(getattr(back, name), getattr(res, name))
    with pytest.raises(ValueError, match="out of range"):
        acc.add(torch.tensor([0, 1, 2, 10]), div)
    with pytest.raises(ValueError, match="lacks keys"):
        DivisionResult.from_state({"sets": res.sets})


def test_division_quality_hand_values():
    """sets [C, N, HC, HN, N, unvisited], clean [T, F, T, F, T, F]; the unvisited sample is
    ignored. Predicted noisy = {1, 3, 4}, truly noisy = {1, 3}: precision 2/3, recall 1,
    F1 = 2 (2/3)(1) / (5/3) = 0.8. Clean shares: S_C 1/1, S_N 1/2 (sample 4), S_H^C 1/1,
    S_H^N 0/1."""
    sets = np.array([CLEAN, NOISY, HARD_CLEAN, HARD_NOISY, NOISY, UNVISITED])
    clean = np.array([True, False, True, False, True, False])
    q = division_quality(sets, clean)
    assert (q["n_clean"], q["n_noisy"], q["n_hard_clean"], q["n_hard_noisy"]) == (1, 2, 1, 1)
    assert q["noisy_precision"] == pytest.approx(2 / 3)
    assert q["noisy_recall"] == 1.0
    assert q["noisy_f1"] == pytest.approx(0.8)
    assert q["clean_share_clean"] == 1.0 and q["clean_share_noisy"] == 0.5
    assert q["clean_share_hard_clean"] == 1.0 and q["clean_share_hard_noisy"] == 0.0


def test_division_quality_empty_sets_are_nan_free():
    """All pairs clean and determined clean: no noisy predictions or noisy pairs, so
    precision = recall = F1 = 0/0 := 0.0; empty sets have clean share None."""
    q = division_quality(torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.bool))
    assert q["noisy_precision"] == q["noisy_recall"] == q["noisy_f1"] == 0.0
    assert q["clean_share_clean"] == 1.0
    assert q["clean_share_noisy"] is None and q["clean_share_hard_noisy"] is None
    with pytest.raises(ValueError, match="same length"):
        division_quality(np.zeros(3), np.ones(2, dtype=bool))


# ------------------------------------------------- no ties, tanh evidence, hard sets


@pytest.mark.parametrize("W", [1, 2])
def test_argmax_has_no_ties_above_the_evidence_ceiling(W):
    """Pair 1's diagonal raw 7 against its rival (image 1, caption 0) at raw 6: both exceed
    the softplus log-evidence ceiling 50 (raw ~5). The capped evidence tied them and argmax
    picked index 0, marking the clean pair noisy; the exact log-space opinion ranks them."""
    K = 8
    raw = torch.full((W, K, K), -3.0)
    raw[:, 1, 1] = 7.0
    raw[:, 1, 0] = 6.0
    div = divide_batch(raw, function="softplus")
    assert div.belief_argmax[1].item() == 1
    assert div.sets[1].item() == CLEAN


def test_opinions_finite_and_exact_for_huge_scores():
    """Raw 1e4 (log evidence 1e5, e = inf in any float) still gives b + u = 1, finite u."""
    raw = torch.full((2, 4, 4), -5.0)
    raw[:, 0, 0] = 1e4
    raw[:, 2, 3] = 80.0
    b, u = batch_opinions(raw)
    assert torch.isfinite(b).all() and torch.isfinite(u).all()
    torch.testing.assert_close(b.sum(-1) + u, torch.ones(4))
    assert b[0].argmax().item() == 0 and b[2].argmax().item() == 3 and b[3].argmax().item() == 2


def test_tanh_evidence_division_and_floor():
    """tanh evidence has no floor: u_floor ~ 1 (every score at r -> -inf gives e = e^-10),
    so u_bar ~ u; 'subtract' is meaningless for it and rejected."""
    u_floor = floor_uncertainty(32, 2, function="tanh").item()
    assert u_floor == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(ValueError, match="softplus evidence only"):
        divide_batch(torch.zeros(1, 4, 4), function="tanh", floor="subtract")
    div = divide_batch(torch.full((2, 6, 6), -50.0), function="tanh")
    assert div.u_bar.min().item() > 0.999
    assert (div.sets == HARD_NOISY).all()


def test_hard_sets_fill_when_every_pair_is_uncertain():
    """The regime measured after warm-up at xi1 = 0.1 (docs/methods/ugncl.md): every raw
    score in tanh's lower tail, so u ~ 1 and all 32 pairs are hard. Pairs 0-15 have a
    diagonal clearly above their rivals (-0.5 vs -1), pairs 16-31 one below (-1.2). The
    released label (the diagonal's share of all evidence, 0.39 here) and the paper's b_ii
    mark every pair hard-noisy; the mean-rival label splits them."""
    K = 32
    raw = torch.full((2, K, K), -1.0)
    d = torch.arange(K)
    raw[:, d, d] = torch.where(d < 16, -0.5, -1.2)
    method_default = divide_batch(raw, function="tanh", soft_label="mean_rival")
    assert (method_default.u_bar > 0.99).all()
    assert (method_default.sets[:16] == HARD_CLEAN).all()
    assert (method_default.sets[16:] == HARD_NOISY).all()
    assert method_default.soft_label[:16].min() > 0.9
    for rule in ("projected", "belief"):
        assert (divide_batch(raw, function="tanh", soft_label=rule).sets == HARD_NOISY).all()
    # max_rival: y > 0.5 exactly when the diagonal wins the argmax.
    strongest = divide_batch(raw, function="tanh", soft_label="max_rival")
    assert ((strongest.sets == HARD_CLEAN) == (strongest.belief_argmax == d)).all()
    with pytest.raises(ValueError, match="soft_label"):
        divide_batch(raw, soft_label="median")


def test_top_rival_soft_label_interpolates_mean_and_max_rival() -> None:
    """Row 0: diagonal log evidence 0, rivals 1, -1, -3 (K = 4).
    lam = 2: rival = log((e + 1/e) / 2) = log cosh 1 -> y = sigmoid(-0.43378) = 0.39322;
    lam = 3 (all rivals) = mean_rival, lam = 1 = max_rival = sigmoid(-1)."""
    from ugncl.methods.ugncl.division import hard_soft_label

    log_e = torch.tensor(
        [[0.0, 1.0, -1.0, -3.0], [0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 2.0]],
        dtype=torch.float64,
    )
    y = hard_soft_label(log_e, "top_rival", lam=2)
    assert y[0].item() == pytest.approx(1 / (1 + math.cosh(1.0)), rel=1e-12)
    torch.testing.assert_close(
        hard_soft_label(log_e, "top_rival", lam=3), hard_soft_label(log_e, "mean_rival")
    )
    torch.testing.assert_close(
        hard_soft_label(log_e, "top_rival", lam=1), hard_soft_label(log_e, "max_rival")
    )
    # lam beyond the K - 1 rivals is clipped; top_rival without lam is refused.
    torch.testing.assert_close(
        hard_soft_label(log_e, "top_rival", lam=99), hard_soft_label(log_e, "mean_rival")
    )
    with pytest.raises(ValueError, match="needs lam"):
        hard_soft_label(log_e, "top_rival")


def test_centred_division_is_shift_invariant_and_vacuous_at_equal_scores():
    """Centred scores: equal scores are the vacuous batch (u_bar = 1, every pair hard), and a
    per-view shift changes nothing; uncentred, the same shift changes the division (tanh
    is not shift-invariant, and the fused bidirectional evidence mixes the views)."""
    eq = divide_batch(torch.full((2, 8, 8), 3.0), function="tanh", centring="batch")
    assert torch.allclose(eq.u_bar, torch.ones(8))
    g = torch.Generator().manual_seed(0)
    raw = torch.randn(2, 8, 8, generator=g)
    raw[:, torch.arange(8), torch.arange(8)] += 2.0
    shift = torch.tensor([0.8, -1.3]).view(2, 1, 1)
    kw = dict(function="tanh", soft_label="top_rival", lam=3)
    a = divide_batch(raw, centring="batch", **kw)
    b = divide_batch(raw + shift, centring="batch", **kw)
    assert torch.equal(a.sets, b.sets)
    assert torch.allclose(a.u_bar, b.u_bar, atol=1e-6)
    assert torch.allclose(a.soft_label, b.soft_label, atol=1e-6)
    a0 = divide_batch(raw, centring="none", **kw)
    b0 = divide_batch(raw + shift, centring="none", **kw)
    assert not torch.equal(a0.sets, b0.sets)
    # A dominant diagonal lowers the centred u_bar below the vacuous 1.
    assert (a.u_bar < 1.0).all()


@pytest.mark.parametrize("rule", ["top_rival", "mean_rival", "max_rival", "projected", "belief"])
def test_null_soft_labels_score_each_mismatched_pair_as_if_it_were_the_diagonal(rule) -> None:
    """Entry (i, j) of row i, its rivals the row without i and j: the same label
    ``hard_soft_label`` gives a batch whose row holds only those candidates."""
    from ugncl.methods.ugncl.division import hard_soft_label, null_soft_labels

    g = torch.Generator().manual_seed(3)
    K, lam = 7, 3
    log_e = 3.0 * torch.randn(K, K, generator=g, dtype=torch.float64)
    expected = []
    for i, j in itertools.permutations(range(K), 2):
        row = log_e[i, [j] + [k for k in range(K) if k not in (i, j)]]
        # A (K - 1)-candidate batch whose row 0 is the null pair; the other rows never read.
        batch = torch.zeros(K - 1, K - 1, dtype=torch.float64)
        batch[0] = row
        expected.append(hard_soft_label(batch, rule, lam)[0].item())
    got = null_soft_labels(log_e, rule, lam)
    assert got.shape == (K * (K - 1),)
    assert np.allclose(np.sort(got.numpy()), np.sort(expected), atol=1e-12)
    with pytest.raises(ValueError, match="K >= 3"):
        null_soft_labels(log_e[:2, :2], rule, lam)


def test_null_level_holds_back_the_lucky_pairs_of_a_model_that_cannot_rank() -> None:
    """Random scores (a model that has learned nothing): y > 0.5 puts about half the pairs in
    hard-clean; the null's 0.9 quantile lets a tenth to a fifth in (a diagonal's bidirectional
    evidence is 2 e_ii, a mismatched entry's the sum of two different scores, so random
    diagonals sit a little above the null here). A model that ranks every diagonal first
    keeps every pair clean, as the paper's division does; the threshold never falls
    below epsilon."""
    from ugncl.methods.ugncl.division import fused_log_evidence, null_threshold

    g = torch.Generator().manual_seed(0)
    K, n = 32, 40
    kw = dict(function="tanh", soft_label="top_rival", lam=K - 1)
    plain = torch.zeros(n * K)
    tested = torch.zeros(n * K)
    for b in range(n):
        raw = 0.05 * torch.randn(2, K, K, generator=g) - 1.0
        plain[b * K : (b + 1) * K] = (divide_batch(raw, **kw).sets == HARD_CLEAN).float()
        tested[b * K : (b + 1) * K] = (
            divide_batch(raw, null_level=0.1, **kw).sets == HARD_CLEAN
        ).float()
    assert 0.3 < plain.mean().item() < 0.6
    assert 0.05 < tested.mean().item() < 0.2
    ranked = 0.3 * torch.randn(2, K, K, generator=g) - 1.0
    ranked[:, torch.arange(K), torch.arange(K)] += 1.5
    log_e = fused_log_evidence(ranked, function="tanh")
    assert null_threshold(log_e, "top_rival", K - 1, 0.1, 0.5).item() > 0.5
    assert null_threshold(log_e, "top_rival", K - 1, 0.1, 0.99).item() == pytest.approx(0.99)
    paper = divide_batch(ranked, **kw).sets
    assert ((paper == CLEAN) | (paper == HARD_CLEAN)).all()
    assert torch.equal(paper, divide_batch(ranked, null_level=0.1, **kw).sets)


# ------------------------------------------------------------ the determined pairs' test


def test_pair_evidence_holds_each_pairs_own_evidence_on_its_diagonal() -> None:
    """A pair's fused evidence as a training pair (2 e_ii per view, fused) is the diagonal of
    the bidirectional fusion the division ranks by; off the diagonal, a mismatched
    combination gets the same formula (2 e_ik per view)."""
    from ugncl.methods.ugncl.division import fused_log_evidence, pair_log_evidence
    from ugncl.methods.ugncl.evidential import log_evidence_exact

    raw = torch.randn(2, 6, 6, generator=torch.Generator().manual_seed(3))
    views = log_evidence_exact(raw, 0.1, "keep", "tanh")
    pairs = pair_log_evidence(views)
    fused = fused_log_evidence(raw, function="tanh")
    assert torch.allclose(torch.diagonal(pairs), torch.diagonal(fused), atol=1e-10)
    one = pair_log_evidence(views[:1])
    assert torch.allclose(one, views[0] + math.log(2.0), atol=1e-12)


def test_null_test_keeps_a_clean_pair_that_one_rival_outranks() -> None:
    """Pair 0 is a clean pair whose caption also fits image 1 better (a caption that fits
    several images): the argmax of Eq. 9 calls it noisy, the null test clean, since its
    score is far above what the batch's mismatched combinations reach."""
    K = 8
    raw = torch.full((1, K, K), -0.5)
    raw[0, torch.arange(K), torch.arange(K)] = 0.6
    raw[0, 1, 0] = 0.8  # image 1 fits caption 0 better than image 0 does
    argmax = divide_batch(raw, function="tanh")
    tested = divide_batch(raw, function="tanh", determined_rule="null_test")
    assert (argmax.u_bar < 0.5).all()  # every pair determined
    assert argmax.sets[0] == NOISY and tested.sets[0] == CLEAN
    assert tested.soft_label[0] == 1.0
    assert (tested.sets[1:] == CLEAN).all()


@pytest.mark.parametrize("level", [0.05, 0.2])
def test_null_test_lets_about_its_level_of_unmemorised_noisy_pairs_through(level) -> None:
    """Noisy pairs whose captions are other images' (their score a draw from the mismatched
    scores' distribution): the null test calls about ``level`` of them clean at any batch
    size; clean pairs scored two spreads above the null (a model that ranks them near the
    top, not always first) keep more of them than the argmax, which loses more with K."""
    g = torch.Generator().manual_seed(0)
    for K in (16, 64):
        noisy_clean, clean_kept, argmax_kept = [], [], []
        for _ in range(3000 // K):
            raw = 0.3 * torch.randn(1, K, K, generator=g)
            # the first half of the batch are clean pairs: a margin of two spreads
            raw[0, torch.arange(K // 2), torch.arange(K // 2)] += 0.6
            calls = divide_batch(raw, function="tanh", determined_rule="null_test",
                                 determined_level=level).sets == CLEAN  # fmt: skip
            noisy_clean.append(calls[K // 2 :].float().mean())
            clean_kept.append(calls[: K // 2].float().mean())
            argmax_kept.append((divide_batch(raw, function="tanh").sets[: K // 2] == CLEAN)
                               .float().mean())  # fmt: skip
        assert torch.stack(noisy_clean).mean().item() == pytest.approx(level, abs=0.4 * level)
        assert torch.stack(clean_kept).mean() > torch.stack(argmax_kept).mean() + K / 640


def test_null_test_falls_back_to_the_argmax_on_a_tail_of_two_pairs() -> None:
    raw = torch.tensor([[[0.9, 0.1], [0.2, 0.3]]])
    tested = divide_batch(raw, function="tanh", determined_rule="null_test")
    assert torch.equal(tested.sets, divide_batch(raw, function="tanh").sets)


def test_an_unknown_determined_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="determined rule must be one of"):
        divide_batch(torch.zeros(1, 4, 4), function="tanh", determined_rule="median")
