"""One noise-detection record for every method (ugncl/methods/noise_detection.py)."""

import numpy as np
import pytest

from ugncl.methods.noise_detection import detection_record, selection_sets, weight_quality
from ugncl.methods.ugncl.division import CLEAN, NOISY, division_quality

CLEAN_FLAGS = np.array([True, True, False, False])


def test_weight_quality_by_hand():
    q = weight_quality(np.array([0.9, 0.4, 0.5, 0.1]), CLEAN_FLAGS)
    # clean/noisy pairs ordered correctly: (0.9>0.5), (0.9>0.1), (0.4<0.5), (0.4>0.1) -> 3/4
    assert q["weight_auc"] == pytest.approx(0.75)
    assert q["weight_mean_clean"] == pytest.approx(0.65)
    assert q["weight_mean_noisy"] == pytest.approx(0.3)


def test_weight_quality_one_class_and_nan():
    q = weight_quality(np.array([0.2, 0.3]), np.array([True, True]))
    assert q["weight_auc"] is None and q["weight_mean_noisy"] is None
    q = weight_quality(np.array([1.0, np.nan, 0.0, np.nan]), CLEAN_FLAGS)
    assert q["weight_auc"] == 1.0  # NaN (unvisited) samples are ignored


def test_selection_keys_and_values_match_the_division_record():
    selected_clean = np.array([True, False, False, True])
    rec = detection_record(CLEAN_FLAGS, selected=selected_clean, selects="clean")
    # predicted noisy = [F, T, T, F]; true noisy = [F, F, T, T]: tp 1, precision 1/2, recall 1/2
    assert rec["noisy_precision"] == 0.5 and rec["noisy_recall"] == 0.5
    assert rec["noisy_f1"] == 0.5
    division = division_quality(np.array([CLEAN, NOISY, NOISY, CLEAN]), CLEAN_FLAGS)
    for key, value in rec.items():
        assert division[key] == value
    assert not any("hard" in k for k in rec)
    dropped = detection_record(CLEAN_FLAGS, selected=~selected_clean, selects="noisy")
    assert dropped == rec


def test_prefix_and_visited():
    rec = detection_record(
        CLEAN_FLAGS, weights=np.array([1.0, 1.0, 0.0, np.nan]),
        selected=np.array([True, True, False, True]), prefix="bank_",
    )  # fmt: skip
    assert set(rec) >= {"bank_weight_auc", "bank_noisy_f1", "bank_n_clean"}
    assert rec["bank_n_clean"] == 2 and rec["bank_n_noisy"] == 1  # sample 3 not visited
    assert selection_sets(np.array([True]), selects="noisy").tolist() == [NOISY]
    with pytest.raises(ValueError):
        selection_sets(np.array([True]), selects="drop")


def test_weight_histograms_split_clean_and_noisy():
    q = weight_quality(np.array([0.9, 0.4, 0.5, 0.1, np.nan]), np.array([1, 0, 1, 0, 1], bool))
    edges = q["weight_hist_edges"]
    assert len(edges) == 21 and edges[0] == pytest.approx(0.1) and edges[-1] == pytest.approx(0.9)
    assert sum(q["weight_hist_clean"]) == 2 and sum(q["weight_hist_noisy"]) == 2
    assert q["weight_hist_noisy"][0] == 1 and q["weight_hist_clean"][-1] == 1
