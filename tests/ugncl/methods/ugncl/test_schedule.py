"""The division's schedule: which epoch starts divide, whether an epoch uses its division
(fixed / agreed / separated), the pre-filter's start, the step clock and the state."""

from __future__ import annotations

import numpy as np
import pytest

from ugncl.methods.ugncl.division import CLEAN, NOISY
from ugncl.methods.ugncl.schedule import DivisionSchedule


def _schedule(start: str, **kw) -> DivisionSchedule:
    settings = {"separation": 2.0, "agreement": 0.5, "max_wait": 2, **kw}
    return DivisionSchedule(start, **settings)


def test_fixed_divides_from_the_warm_up_on_and_always_uses_it() -> None:
    schedule = _schedule("fixed")
    assert [schedule.divides(e, warmup_epochs=2) for e in range(4)] == [False, False, True, True]
    assert schedule.decide(0, np.zeros(4), global_step=30) == {"dividing": True}
    assert schedule.start_step == 30 and not schedule.deferred
    assert schedule.steps_since_start(45) == 15 and schedule.steps_since_start(10) == 0


def test_agreed_divides_the_last_warm_up_epoch_for_reference_and_starts_on_agreement() -> None:
    schedule = _schedule("agreed")
    assert [schedule.divides(e, warmup_epochs=2) for e in range(3)] == [False, True, True]
    calls = np.array([CLEAN, NOISY] * 8)
    assert schedule.decide(-1, calls, 10) == {"dividing": False}  # reference only
    assert schedule.start_step is None and not schedule.deferred
    flipped = np.array([CLEAN, CLEAN, NOISY, NOISY] * 4)  # agrees with calls at chance
    first = schedule.decide(0, flipped, 20)
    assert first["dividing"] is False and schedule.deferred and first["start_agreement"] < 0.5
    assert schedule.steps_since_start(25) == 0
    same = schedule.decide(1, flipped, 30)
    assert same["dividing"] is True and same["start_agreement"] == pytest.approx(1.0)
    assert schedule.start_step == 30 and not schedule.deferred
    # Once started, the last warm-up epoch of a later run would not divide again.
    assert not schedule.divides(1, warmup_epochs=2)


def test_agreed_starts_at_the_latest_after_max_wait() -> None:
    schedule = _schedule("agreed", max_wait=1)
    rng = np.random.default_rng(0)
    schedule.decide(0, rng.integers(0, 2, 50), 0)
    assert schedule.decide(1, rng.integers(0, 2, 50), 5)["dividing"] is True


def test_separated_reads_the_kept_labels_and_forgets_them_each_epoch() -> None:
    schedule = _schedule("separated")
    assert schedule.wants_labels
    schedule.labels.append(np.full(40, 0.5))
    assert not schedule.divides(0, warmup_epochs=1) and schedule.labels == []
    schedule.labels.append(np.r_[np.full(20, 0.05), np.full(20, 0.95)])  # two clear modes
    record = schedule.decide(0, np.zeros(40), 12)
    assert record["dividing"] is True and record["start_separation"] > 2.0
    assert schedule.labels == [] and not schedule.wants_labels


def test_the_prefilter_starts_the_division_and_the_state_round_trips() -> None:
    schedule = _schedule("agreed")
    schedule.decide(-1, np.array([CLEAN, NOISY]), 3)
    schedule.start_now(global_step=8)
    assert schedule.started and not schedule.deferred and schedule.start_step == 8
    schedule.start_now(global_step=20)  # a later pre-filter epoch keeps the first start
    assert schedule.start_step == 8
    again = _schedule("agreed")
    again.load_state(schedule.state())
    assert (again.started, again.deferred, again.start_step) == (True, False, 8)
    np.testing.assert_array_equal(again.previous_sets, schedule.previous_sets)
    assert _schedule("fixed").state()["started"] is True
    with pytest.raises(ValueError, match="start must be one of"):
        _schedule("late")
