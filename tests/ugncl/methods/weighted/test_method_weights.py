"""NPC / SDD / OSA weight formulas on hand-computed values (ugncl/methods/weighted/weights.py)."""

import math

import numpy as np
import pytest
import torch

from ugncl.methods.weighted.weights import (
    SpaceShift,
    auto_sdd_thresholds,
    bank_clean_mask,
    consistency_weight,
    gmm_posterior,
    min_max,
    npc_weight,
    osa_weights,
    self_drop_keep,
    significance_ratio,
    significance_weight,
)


def test_npc_weight_tanh_below_one_else_one():
    w = npc_weight(torch.tensor([0.5, 0.999, 1.0, 2.0]))
    assert torch.allclose(w, torch.tensor([math.tanh(0.5), math.tanh(0.999), 1.0, 1.0]))


def _both(x):
    """Equal image-to-text and text-to-image loss per entry: ``(i2t, t2i)`` of one bank pair."""
    x = torch.as_tensor(x, dtype=torch.float32)
    return x, x


def test_significance_ratio_bank_grouping_mean_of_two_ratios():
    # The releases' grouping: image ratios 2/1 = 2 and 1/2 = 0.5; text ratios 1/1 and 3/1.
    before = (*_both([2.0, 1.0]), *_both([1.0, 3.0]))
    after = (*_both([1.0, 2.0]), *_both([1.0, 1.0]))
    r = significance_ratio(before, after, "bank")
    assert torch.allclose(r, torch.tensor([1.5, 1.75]))
    # r = (0.5 + 0.5) / 2 = 0.5 < 1 -> tanh(0.5)
    w = significance_weight((*_both([1.0]), *_both([1.0])), (*_both([2.0]), *_both([2.0])), "bank")
    assert w.item() == pytest.approx(math.tanh(0.5))


def test_significance_ratio_grouped_by_direction_worked_example():
    # Image entry 0.2 -> 0.1, text entry 4.0 -> 4.6 (each direction alike). Paper (NPC Eq. 6-7,
    # SDD Eq. 9-10): p = 0.2 + 4.0 -> 0.1 + 4.6, r = 4.2 / 4.7 = 0.894, w = tanh(r) = 0.713.
    # The releases' bank grouping: r = (0.2/0.1 + 4.0/4.6) / 2 = 1.43, w = 1.
    before = (*_both([0.2]), *_both([4.0]))
    after = (*_both([0.1]), *_both([4.6]))
    assert significance_ratio(before, after).item() == pytest.approx(4.2 / 4.7, rel=1e-6)
    assert significance_weight(before, after).item() == pytest.approx(0.713, abs=5e-4)
    assert significance_weight(before, after, "bank").item() == 1.0
    # The default is the paper's grouping.
    assert significance_weight(before, after, "direction").item() == pytest.approx(0.713, abs=5e-4)


def test_significance_ratio_direction_pairs_the_same_direction_of_both_entries():
    # p takes i2t of both entries, q t2i of both: swapping which entry holds a change moves
    # the direction grouping only through the totals.
    before = (torch.tensor([1.0]), torch.tensor([3.0]), torch.tensor([2.0]), torch.tensor([5.0]))
    after = (torch.tensor([2.0]), torch.tensor([3.0]), torch.tensor([1.0]), torch.tensor([4.0]))
    # p: (1 + 2) / (2 + 1) = 1; q: (3 + 5) / (3 + 4) = 8/7
    r = significance_ratio(before, after)
    assert r.item() == pytest.approx(0.5 * (1.0 + 8 / 7))
    with pytest.raises(ValueError, match="grouping"):
        significance_ratio(before, after, "other")


def test_significance_guarded_against_zero_losses():
    z = torch.zeros(2)
    for grouping in ("direction", "bank"):
        r = significance_ratio((z,) * 4, (z,) * 4, grouping)
        assert torch.equal(r, torch.ones(2))  # unchanged zero loss: no information, weight 1
        r = significance_ratio((torch.ones(2),) * 4, (z,) * 4, grouping)
        assert torch.isfinite(r).all() and (r > 1).all()
        assert torch.equal(npc_weight(r), torch.ones(2))


def test_gmm_posterior_picks_components_by_mean():
    v = np.array([1.0, 1.1, 0.9, 1.05, 5.0, 5.2, 4.9, 5.1])
    low = gmm_posterior(v, "low")
    high = gmm_posterior(v, "high")
    assert (low[:4] > 0.99).all() and (low[4:] < 0.01).all()
    assert np.allclose(low + high, 1.0)
    v_nan = np.append(v, np.nan)
    assert gmm_posterior(v_nan, "low")[-1] == 0.0
    assert np.array_equal(gmm_posterior(np.full(3, 2.0), "high"), np.ones(3))


def test_min_max_and_consistency_weight():
    assert np.allclose(min_max(np.array([1.0, 3.0, 5.0])), [0.0, 0.5, 1.0])
    assert np.array_equal(min_max(np.array([2.0, 2.0])), [1.0, 1.0])
    sim = np.array([10.0, 11.0, 12.0, 40.0, 41.0, 42.0])
    w = consistency_weight(sim)
    assert w.dtype == np.float32 and w.min() == 0.0 and w.max() == 1.0
    assert (w[:3] < 0.01).all() and (w[3:] > 0.99).all()


def test_sdd_thresholds_inclusive_drop_strict_bank():
    assert self_drop_keep(np.array([19.9, 20.0, 20.1]), 20.0).tolist() == [False, False, True]
    assert bank_clean_mask(np.array([29.0, 30.0, 31.0]), 30.0).tolist() == [False, False, True]
    assert auto_sdd_thresholds(20.0, 5.0) == (20.0, 30.0)
    assert auto_sdd_thresholds(1.0, 0.5, alpha_std=1.0, beta_std=4.0) == (1.5, 3.0)


def test_space_shift_uses_pairs_of_different_images_only():
    sim = torch.tensor([[9.0, 9.0, 1.0], [9.0, 9.0, 2.0], [3.0, 4.0, 9.0]])
    shift = SpaceShift()
    shift.add(sim, torch.tensor([0, 0, 1]))  # rows 0 and 1 share image 0
    vals = np.array([1.0, 2.0, 3.0, 4.0])
    assert shift.count == 4
    assert shift.mean == pytest.approx(vals.mean())
    assert shift.std == pytest.approx(vals.std())
    with pytest.raises(ValueError):
        _ = SpaceShift().mean


def test_osa_paper_scoring_by_hand():
    beta, scale = 20.0, 100.0
    s = torch.tensor([10.0, 20.0, 50.0, 20.0 + 200.0 / 3, 200.0])
    w = osa_weights(s, beta, scale=scale)
    # x = [0, 0, 0.3, 2/3, 1]: w = x^2 (1 - x) = [0, 0, 0.063, 4/27, 0]
    assert torch.allclose(w, torch.tensor([0.0, 0.0, 0.063, 4.0 / 27.0, 0.0]), atol=1e-6)


def test_osa_released_scoring_by_hand_and_no_nan():
    w = osa_weights(torch.tensor([25.0, 30.0, 10.0]), 20.0, scoring="released")
    # x = relu(s - 20) / max = [0.5, 1, 0]; w = x^2 (1 - x^2) = [0.1875, 0, 0]
    assert torch.allclose(w, torch.tensor([0.1875, 0.0, 0.0]))
    for scoring in ("paper", "released"):
        w = osa_weights(torch.tensor([5.0, 10.0]), 20.0, scoring=scoring)  # nothing above beta
        assert torch.isfinite(w).all() and torch.equal(w, torch.zeros(2))
    assert osa_weights(torch.zeros(0), 1.0, scoring="released").shape == (0,)
    with pytest.raises(ValueError):
        osa_weights(torch.zeros(1), 0.0, scoring="batch")
