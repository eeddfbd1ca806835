"""tools/bench.py methods: the epoch and setup seconds read from a run's records."""

import pytest


def test_epoch_seconds_from_records(tool):
    bench = tool("bench")
    records = [
        {"event": "setup", "time": 100.0},
        {"event": "method_setup", "time": 104.5},
        {"event": "train", "epoch": 0, "time": 110.0},
        {"event": "val", "epoch": 0, "time": 112.0},
        {"event": "noise_detection", "epoch": 1, "time": 113.0},
        {"event": "train", "epoch": 1, "time": 118.0},
        {"event": "train", "epoch": 1, "time": 121.0},
        {"event": "val", "epoch": 1, "time": 125.0},
    ]
    # Epoch 1: from the end of epoch 0's validation to its last step (its pass included).
    assert bench._epoch_seconds(records) == pytest.approx((9.0, 4.5))
    plain = [r for r in records if r["event"] != "method_setup"]
    assert bench._epoch_seconds(plain) == pytest.approx((9.0, None))
