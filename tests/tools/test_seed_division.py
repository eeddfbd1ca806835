"""tools/seed_division.py: what UGNCL's seed division selects, before any training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def activity_world(tmp_path_factory) -> Path:
    """300 images of the activity generator (features 36 x 64) with a 50% noise file."""
    from precomputed.synthetic import make_synthetic

    root = tmp_path_factory.mktemp("activity")
    make_synthetic(root, num_train=300, num_dev=10, num_test=10, seed=0, feature_dim=64,
                   generator="activity", noise_ratios=(0.5,), noise_subsets=())  # fmt: skip
    return root


def _data(root: Path, *extra: str) -> list[str]:
    return [f"data.root={root}", "data.noise_ratio=0.5", "data.dev_images=10", *extra]


def test_the_seed_selects_mostly_clean_pairs_and_estimates_the_noise(
    tool, activity_world, capsys
) -> None:
    noise = activity_world / "synthetic_precomp" / "noise_0.5_seed0.npy"
    data = _data(activity_world, f"data.noise_file={noise}", "data.train_images=null")
    argv = ["--cfg", "ugncl_synthetic", "--json", "--set", *data]
    assert tool("seed_division").main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pairs"] == 1500 and out["selected"] > 100
    assert out["selected_clean_share"] > 0.9
    assert out["noisy_selected"] < 0.03 and out["clean_selected"] > 0.2
    assert abs(out["estimated_noisy_share"] - out["noisy_share"]) < 0.12
    # A stricter false-discovery rate selects fewer pairs.
    assert tool("seed_division").main([*argv, "method.ugncl.seed_fdr=0.01"]) == 0
    assert json.loads(capsys.readouterr().out)["selected"] < out["selected"]


def test_a_fit_that_says_nothing_selects_no_pair(tool, tiny_world, capsys) -> None:
    argv = ["--cfg", "ugncl_synthetic", "--set", *_data(tiny_world, "data.dev_images=12")]
    assert tool("seed_division").main(argv) == 0
    out = capsys.readouterr().out
    assert "240 training pairs" in out
    assert "UGNCL divides by the model from the start" in out


def test_the_seed_needs_ugncl(tool, tiny_world, capsys) -> None:
    assert tool("seed_division").main(["--cfg", "clip_synthetic", "--set",
                                       f"data.root={tiny_world}"]) == 2  # fmt: skip
    assert capsys.readouterr().err.startswith("error: the seed division is UGNCL's")


def test_a_null_train_seed_is_drawn_and_printed(tool, tiny_world, capsys) -> None:
    """ugncl_flickr has train.seed: null (the README's command): the folds draw a seed, as a
    training run does, and the report names it."""
    argv = ["--cfg", "ugncl_synthetic", "--set", *_data(tiny_world, "data.dev_images=12"),
            "train.seed=null"]  # fmt: skip
    assert tool("seed_division").main(argv) == 0
    out = capsys.readouterr().out
    assert "train.seed is null: the folds drew seed" in out and "240 training pairs" in out


@pytest.mark.parametrize("tool_name", ["seed_division", "make_noise"])
def test_a_negative_seed_is_refused(tool, tool_name, capsys) -> None:
    argv = ["--cfg", "ugncl_synthetic"] if tool_name == "seed_division" else ["--name", "x"]
    with pytest.raises(SystemExit) as exc:
        tool(tool_name).main([*argv, "--seed", "-5"])
    assert exc.value.code == 2
    assert "--seed: -5 is outside [0, 2**32)" in capsys.readouterr().err
