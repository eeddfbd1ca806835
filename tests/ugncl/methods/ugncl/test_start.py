"""The division's start: two-mode separation of the soft labels and the start rule."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ugncl.methods.ugncl.division import HARD_CLEAN, HARD_NOISY, DivisionResult
from ugncl.methods.ugncl.method import UGNCLMethod
from ugncl.methods.ugncl.start import label_logits, should_start_division, two_mode_separation


def test_separation_tells_two_modes_from_one() -> None:
    rng = np.random.default_rng(0)
    two = np.r_[rng.normal(-3, 1, 400), rng.normal(3, 1, 600)]
    fit = two_mode_separation(two)
    assert fit["separation"] > 3.5
    assert fit["low_mean"] == pytest.approx(-3, abs=0.3)
    assert fit["high_mean"] == pytest.approx(3, abs=0.3)
    assert fit["high_weight"] == pytest.approx(0.6, abs=0.05)
    assert two_mode_separation(rng.normal(0, 1, 1000))["separation"] < 2.0
    assert two_mode_separation(np.ones(10))["separation"] == 0.0
    assert two_mode_separation(np.array([1.0, np.nan]))["separation"] == 0.0


def test_label_logits_are_finite_and_drop_unscored_pairs() -> None:
    x = label_logits(np.array([0.0, 1.0, 0.5, np.nan], np.float32))
    assert len(x) == 3 and np.isfinite(x).all() and x[2] == 0.0
    assert x[0] == pytest.approx(-x[1])


@pytest.mark.parametrize(
    ("history", "start"),
    [([], False), ([1.0], False), ([2.5], True), ([1.0, 1.5], False), ([1.0, 1.5, 1.4], True),
     ([1.9, 2.0], True)],
)  # fmt: skip
def test_start_rule(history: list[float], start: bool) -> None:
    assert should_start_division(history, threshold=2.0) is start


def _division(labels: np.ndarray) -> DivisionResult:
    n = len(labels)
    sets = np.where(labels > 0.5, HARD_CLEAN, HARD_NOISY).astype(np.int8)
    ones = np.ones(n, np.float32)
    return DivisionResult(u=ones, u_bar=ones.copy(), soft_label=labels, sets=sets)


def test_divide_keeps_top_rival_labels_until_the_start() -> None:
    import torch

    method = UGNCLMethod(division_start="separated")
    raw = torch.randn(2, 8, 8)
    method.divide(raw, lam=3)
    assert len(method._start_labels) == 1 and method._start_labels[0].shape == (8,)
    method.started = True
    method.divide(raw, lam=3)
    assert len(method._start_labels) == 1


def test_method_defers_the_division_until_the_labels_separate(monkeypatch) -> None:
    """Before the soft labels separate, the epoch stays a warm-up epoch; at the first epoch
    start where they do, the division starts and is used from then on."""
    rng = np.random.default_rng(1)
    n = 400
    one_mode = (1 / (1 + np.exp(-rng.normal(0.0, 0.3, n)))).astype(np.float32)
    two_modes = 1 / (1 + np.exp(-np.r_[rng.normal(-4, 1, n // 2), rng.normal(4, 1, n // 2)]))
    labels = iter([one_mode, two_modes.astype(np.float32)])
    method = UGNCLMethod(division_pass="separate", division_start="separated")

    def divide(*args, **kwargs) -> DivisionResult:
        y = next(labels)
        method._start_labels.append(y)  # what divide() keeps of every divided batch
        return _division(y)

    monkeypatch.setattr(method, "_divide_with_model", divide)
    ctx = SimpleNamespace(warmup_epochs=1, batch_size=32, global_step=0,
                          clean=np.ones(n, bool), num_samples=n)  # fmt: skip
    first = method.on_epoch_start(ctx, 1)
    assert first["dividing"] is False and method.deferred and first["start_separation"] < 2
    second = method.on_epoch_start(ctx, 2)
    assert second["dividing"] is True and not method.deferred
    assert second["start_separation"] > 2
    state = method.get_extra_state()
    again = UGNCLMethod(division_pass="separate", division_start="separated")
    again.set_extra_state(state)
    assert again.started and not again.deferred


def test_start_labels_travel_in_the_checkpoint_state() -> None:
    """A run resumed at an epoch boundary decides the start on the labels kept before it."""
    import torch

    method = UGNCLMethod(division_start="separated")
    method.divide(torch.randn(2, 8, 8), lam=3)
    again = UGNCLMethod(division_start="separated")
    again.set_extra_state(method.get_extra_state())
    np.testing.assert_array_equal(
        np.concatenate(again._start_labels), np.concatenate(method._start_labels)
    )
    fixed = UGNCLMethod(division_start="fixed")
    assert fixed.started and not fixed.deferred
