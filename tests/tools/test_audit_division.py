"""tools/audit_division.py on a UGNCL run trained on the tiny world."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.tools.test_train import tiny_overrides


@pytest.fixture(scope="module")
def ugncl_run(tool, tiny_world: Path, tmp_path_factory, tiny_model: list[str]) -> Path:
    out = tmp_path_factory.mktemp("runs")
    overrides = tiny_overrides(tiny_world, out, "u", tiny_model, "train.warmup_epochs=1",
                               "train.epochs=1")  # fmt: skip
    assert tool("train").main(["--cfg", "ugncl_synthetic", "--set", *overrides]) == 0
    return out / "u"


def test_audit_divides_the_trained_and_the_fresh_pairs_of_the_run(tool, ugncl_run, capsys) -> None:
    audit = tool("audit_division").main
    assert audit([str(ugncl_run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    noise = np.load(ugncl_run / "noise_index.npy")
    assert out["pairs"] == len(noise) == 48 * 5
    assert out["noisy"] == int((noise != np.arange(len(noise)) // 5).sum())
    assert out["batch_size"] == 16 and out["lambda"] >= 3  # the run's K and lambda_min
    for name in ("trained", "fresh"):
        counts = [out[name][k] for k in ("n_clean", "n_noisy", "n_hard_clean", "n_hard_noisy")]
        assert sum(counts) == out["pairs"]
        assert 0.0 <= out[name]["noisy_kept"] <= 1.0
    assert out["memorised"] == pytest.approx(
        out["trained"]["noisy_kept"] - out["fresh"]["noisy_kept"]
    )
    assert audit([str(ugncl_run), "--batch-size", "8", "--seed", "1"]) == 0
    table = capsys.readouterr().out
    assert "K 8" in table and "trained pairs" in table and "fresh noise" in table


def test_audit_ranks_the_soft_labels_over_batch_orders(tool, ugncl_run, capsys) -> None:
    audit = tool("audit_division").main
    assert audit([str(ugncl_run), "--json", "--draws", "2"]) == 0
    labels = json.loads(capsys.readouterr().out)["soft_labels"]
    assert labels["draws"] == 2
    for key in ("auc_one_order", "auc_mean", "top_clean_share"):
        assert 0.0 <= labels[key] <= 1.0
    assert audit([str(ugncl_run), "--draws", "1"]) == 0
    assert "soft labels of the trained pairs, ROC-AUC" in capsys.readouterr().out
    assert audit([str(ugncl_run), "--draws", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --draws must be >= 1")


def test_audit_reports_whether_the_scores_depend_on_the_pair(tool, ugncl_run, capsys) -> None:
    audit = tool("audit_division").main
    assert audit([str(ugncl_run), "--json", "--spread"]) == 0
    spread = json.loads(capsys.readouterr().out)["spread"]
    assert spread["score_std"] > 0 and spread["input_spread"] > 0 and spread["input_norm"] > 0
    assert audit([str(ugncl_run), "--spread"]) == 0
    assert "similarity vector: spread over the pairs" in capsys.readouterr().out


def test_audit_breaks_the_division_down_by_the_place_the_caption_names(
    tool, ugncl_run, capsys
) -> None:
    audit = tool("audit_division").main
    assert audit([str(ugncl_run), "--json", "--places"]) == 0
    out = json.loads(capsys.readouterr().out)
    groups = out["trained"]["groups"]
    assert set(groups) == {"names its image's place", "names another place", "names no place"}
    assert sum(g["clean"] + g["noisy"] for g in groups.values()) == out["pairs"]
    assert groups["names another place"]["clean"] == 0  # a true caption names its own place
    assert sum(g["noisy"] for g in groups.values()) == out["noisy"]
    assert audit([str(ugncl_run), "--places"]) == 0
    assert "caption names another place" in capsys.readouterr().out


def test_audit_by_place_needs_a_synthetic_world(tool, ugncl_run, tiny_world, tmp_path, capsys):
    copy = tmp_path / "world"
    shutil.copytree(tiny_world, copy)
    (copy / "synthetic_precomp" / "world.json").unlink()
    assert tool("audit_division").main([str(ugncl_run), "--places", "--data-root", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --places reads the scenes") and "no world.json" in err


def test_audit_with_the_null_level_keeps_a_subset_as_hard_clean(tool, ugncl_run, capsys) -> None:
    """--null-level: the threshold is max(epsilon, the null's quantile) >= epsilon, so no pair
    is hard-clean with it that is not without it, trained or fresh."""
    audit = tool("audit_division").main
    assert audit([str(ugncl_run), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert audit([str(ugncl_run), "--json", "--null-level", "0.1"]) == 0
    tested = json.loads(capsys.readouterr().out)
    assert plain["null_level"] is None and tested["null_level"] == 0.1
    for name in ("trained", "fresh"):
        assert tested[name]["n_hard_clean"] <= plain[name]["n_hard_clean"]
        assert tested[name]["noisy_kept"] <= plain[name]["noisy_kept"]
    assert audit([str(ugncl_run), "--null-level", "1.5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: method.ugncl.null_level must be in (0, 1)")


def test_audit_refuses_what_it_cannot_audit(tool, ugncl_run, tmp_path, capsys) -> None:
    audit = tool("audit_division").main
    assert audit([str(tmp_path / "missing")]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert audit([str(ugncl_run), "--batch-size", "1"]) == 2
    assert capsys.readouterr().err.startswith("error: --batch-size must be >= 2")
    assert audit([str(ugncl_run), "--threads", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --threads must be >= 1")
    copy = tmp_path / "copy"
    shutil.copytree(ugncl_run, copy)
    (copy / "noise_index.npy").unlink()
    assert audit([str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "noise_index.npy does not exist" in err
    assert len(err.strip().splitlines()) == 1


def test_audit_reads_the_features_of_a_redrawn_world(
    tool, ugncl_run, tiny_world: Path, tmp_path, capsys
) -> None:
    """--data-root: the same pairs on a copy of the world whose images got new nuisance
    vectors (tools/make_synthetic.py --redraw-nuisance); a root of other captions is refused."""
    redrawn = tmp_path / "redrawn"
    make = tool("make_synthetic").main
    assert make(["--redraw-nuisance", str(tiny_world), "--out", str(redrawn)]) == 0
    assert "nuisance vector redrawn" in capsys.readouterr().out
    assert make(["--redraw-nuisance", str(tiny_world), "--out", str(redrawn)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    audit = tool("audit_division").main
    assert audit([str(ugncl_run), "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert audit([str(ugncl_run), "--json", "--data-root", str(redrawn)]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["data_root"] == str(redrawn) and same["data_root"] != str(redrawn)
    assert other["pairs"] == same["pairs"] and other["noisy"] == same["noisy"]
    # Other images, so other opinions (the tiny model has learnt something of its images).
    assert other["trained"] != same["trained"]

    from precomputed.synthetic import make_synthetic

    elsewhere = make_synthetic(tmp_path / "w7", num_train=48, num_dev=12, num_test=12, seed=7,
                               feature_dim=64)  # fmt: skip
    assert audit([str(ugncl_run), "--data-root", str(elsewhere)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the training captions under --data-root")
    assert len(err.strip().splitlines()) == 1
