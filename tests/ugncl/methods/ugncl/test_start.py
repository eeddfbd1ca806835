"""The division's start: two-mode separation of the soft labels and the start rule."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ugncl.methods.ugncl.division import HARD_CLEAN, HARD_NOISY, NOISY, UNVISITED, DivisionResult
from ugncl.methods.ugncl.method import DIVISION_STREAM, REFERENCE_STREAM, UGNCLMethod
from ugncl.methods.ugncl.start import (
    division_agreement,
    label_logits,
    should_start_division,
    two_mode_separation,
)


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
    assert len(method.schedule.labels) == 1 and method.schedule.labels[0].shape == (8,)
    method.schedule.started = True
    method.divide(raw, lam=3)
    assert len(method.schedule.labels) == 1


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
        method.schedule.labels.append(y)  # what divide() keeps of every divided batch
        return _division(y)

    monkeypatch.setattr(method, "_divide_with_model", divide)
    ctx = SimpleNamespace(warmup_epochs=1, batch_size=32, global_step=0, prefilter=None,
                          clean=np.ones(n, bool), num_samples=n)  # fmt: skip
    first = method.on_epoch_start(ctx, 1)
    assert first["dividing"] is False and method.schedule.deferred and first["start_separation"] < 2
    second = method.on_epoch_start(ctx, 2)
    assert second["dividing"] is True and not method.schedule.deferred
    assert second["start_separation"] > 2
    state = method.get_extra_state()
    again = UGNCLMethod(division_pass="separate", division_start="separated")
    again.set_extra_state(state)
    assert again.schedule.started and not again.schedule.deferred


def test_start_labels_travel_in_the_checkpoint_state() -> None:
    """A run resumed at an epoch boundary decides the start on the labels kept before it."""
    import torch

    method = UGNCLMethod(division_start="separated")
    method.divide(torch.randn(2, 8, 8), lam=3)
    again = UGNCLMethod(division_start="separated")
    again.set_extra_state(method.get_extra_state())
    np.testing.assert_array_equal(
        np.concatenate(again.schedule.labels), np.concatenate(method.schedule.labels)
    )
    fixed = UGNCLMethod(division_start="fixed")
    assert fixed.schedule.started and not fixed.schedule.deferred


def test_agreement_is_chance_corrected_kappa() -> None:
    rng = np.random.default_rng(0)
    a = np.where(rng.random(4000) < 0.5, HARD_NOISY, HARD_CLEAN)
    same = a.copy()
    same[::10] = np.where(same[::10] == HARD_NOISY, HARD_CLEAN, HARD_NOISY)  # 10% flipped
    independent = np.where(rng.random(4000) < 0.5, HARD_NOISY, HARD_CLEAN)
    assert division_agreement(a, a) == pytest.approx(1.0)
    assert division_agreement(a, same) == pytest.approx(0.8, abs=0.03)
    assert abs(division_agreement(a, independent)) < 0.05
    # Determined-noisy counts as a noisy call; unvisited pairs are left out.
    b = a.copy()
    b[a == HARD_NOISY] = NOISY
    b[:100] = UNVISITED
    assert division_agreement(a, b) == pytest.approx(1.0)
    # A call of "all clean" twice: no disagreement to correct for chance.
    clean = np.full(10, HARD_CLEAN)
    assert division_agreement(clean, clean) == 1.0
    with pytest.raises(ValueError, match="same length"):
        division_agreement(a, a[:10])


def test_agreed_start_waits_for_two_divisions_that_repeat(monkeypatch) -> None:
    """The last warm-up epoch divides for reference only; the division starts at the first
    epoch start whose noisy calls repeat the previous epoch's (kappa >= start_agreement), or
    after start_max_wait epochs."""
    rng = np.random.default_rng(2)
    n = 400
    truth = rng.random(n) < 0.5
    noisy_calls = [rng.random(n) < 0.5, rng.random(n) < 0.5, truth, truth]
    calls = iter(noisy_calls)
    method = UGNCLMethod(division_pass="separate", division_start="agreed", start_agreement=0.5)

    def divide(*args, **kwargs) -> DivisionResult:
        return _division(np.where(next(calls), 0.1, 0.9).astype(np.float32))

    monkeypatch.setattr(method, "_divide_with_model", divide)
    ctx = SimpleNamespace(warmup_epochs=2, batch_size=32, global_step=0, prefilter=None,
                          clean=~truth, num_samples=n)  # fmt: skip
    assert method.on_epoch_start(ctx, 0) is None
    reference = method.on_epoch_start(ctx, 1)
    assert reference["dividing"] is False and method.division is None
    chance = method.on_epoch_start(ctx, 2)
    assert chance["dividing"] is False and method.schedule.deferred
    assert abs(chance["start_agreement"]) < 0.2
    resumed = UGNCLMethod(division_pass="separate", division_start="agreed")
    resumed.set_extra_state(method.get_extra_state())
    np.testing.assert_array_equal(resumed.schedule.previous_sets, method.schedule.previous_sets)
    still = method.on_epoch_start(ctx, 3)  # random -> truth: no agreement yet
    assert still["dividing"] is False
    started = method.on_epoch_start(ctx, 4)  # truth -> truth
    assert started["dividing"] is True and started["start_agreement"] == pytest.approx(1.0)
    assert not method.schedule.deferred and method.division is not None

    capped = UGNCLMethod(division_pass="separate", division_start="agreed", start_max_wait=0)
    monkeypatch.setattr(capped, "_divide_with_model", lambda *a, **k: _division(
        np.where(rng.random(n) < 0.5, 0.1, 0.9).astype(np.float32)))  # fmt: skip
    capped.on_epoch_start(ctx, 1)
    assert capped.on_epoch_start(ctx, 2)["dividing"] is True


@pytest.mark.parametrize("ranks", [True, False])
def test_agreed_start_without_warm_up_compares_two_batchings_of_epoch_0(monkeypatch, ranks):
    """No warm-up epoch (a pretrained backbone): epoch 0 divides twice, the reference in
    another batch order; the division starts at once where the two agree (a model that
    ranks) and is deferred where they disagree (calls by the luck of the batch)."""
    rng = np.random.default_rng(3)
    n = 400
    truth = rng.random(n) < 0.5
    streams: list[int] = []

    def divide(ctx, epoch, batch_size, lam, indices=None, stream=DIVISION_STREAM):
        streams.append(stream)
        calls = truth if ranks else rng.random(n) < 0.5
        return _division(np.where(calls, 0.1, 0.9).astype(np.float32))

    method = UGNCLMethod(division_pass="separate", division_start="agreed", start_agreement=0.5)
    monkeypatch.setattr(method, "_divide_with_model", divide)
    ctx = SimpleNamespace(warmup_epochs=0, batch_size=32, global_step=0, prefilter=None,
                          clean=~truth, num_samples=n)  # fmt: skip
    record = method.on_epoch_start(ctx, 0)
    assert streams == [REFERENCE_STREAM, DIVISION_STREAM]
    assert record["dividing"] is ranks and method.schedule.deferred is not ranks
    if ranks:
        assert record["start_agreement"] == pytest.approx(1.0)
    else:
        assert abs(record["start_agreement"]) < 0.2
    method.on_epoch_start(ctx, 1)  # later epochs compare with the previous epoch only
    assert streams == [REFERENCE_STREAM, DIVISION_STREAM, DIVISION_STREAM]

    warm = UGNCLMethod(division_pass="separate", division_start="agreed")
    monkeypatch.setattr(warm, "_divide_with_model", divide)
    streams.clear()
    warm.on_epoch_start(SimpleNamespace(**{**vars(ctx), "warmup_epochs": 2}), 1)
    assert streams == [DIVISION_STREAM]  # the last warm-up epoch is the reference there


@pytest.mark.parametrize(
    ("key", "value"), [("start_agreement", 1.5), ("start_agreement", -1.0), ("start_max_wait", -1)]
)
def test_agreed_start_settings_out_of_range_are_config_errors(key: str, value: float) -> None:
    from ugncl.core.errors import ConfigError

    with pytest.raises(ConfigError, match=key):
        UGNCLMethod(**{key: value})
