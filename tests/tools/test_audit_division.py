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
