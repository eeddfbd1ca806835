"""tools/prefilter.py: what the pre-filter keeps, before any training, for any method."""

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
    return [f"data.root={root}", "data.noise_ratio=0.5", "data.dev_images=10",
            "model.sgraf.img_dim=64", *extra]  # fmt: skip


def test_the_prefilter_keeps_mostly_clean_pairs_and_estimates_the_noise(
    tool, activity_world, capsys
) -> None:
    noise = activity_world / "synthetic_precomp" / "noise_0.5_seed0.npy"
    data = _data(activity_world, f"data.noise_file={noise}", "data.train_images=null")
    argv = ["--cfg", "ugncl_synthetic", "--json", "--set", *data]
    assert tool("prefilter").main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pairs"] == 1500 and out["selected"] > 100
    assert out["selected_clean_share"] > 0.9
    assert out["noisy_selected"] < 0.03 and out["clean_selected"] > 0.2
    assert abs(out["estimated_noisy_share"] - out["noisy_share"]) < 0.12
    # A stricter false-discovery rate selects fewer pairs.
    assert tool("prefilter").main([*argv, "prefilter.fdr=0.01"]) == 0
    assert json.loads(capsys.readouterr().out)["selected"] < out["selected"]


def test_a_fit_that_says_nothing_selects_no_pair(tool, tiny_world, capsys) -> None:
    argv = ["--cfg", "ugncl_synthetic", "--set", *_data(tiny_world, "data.dev_images=12")]
    assert tool("prefilter").main(argv) == 0
    out = capsys.readouterr().out
    assert "240 training pairs" in out
    assert "trains as prefilter.kind=none" in out


def test_any_method_may_ask_and_pixels_are_refused(tool, tiny_world, tmp_path, capsys):
    from tests.conftest import write_tiny_clip_world

    argv = ["--cfg", "triplet_synthetic", "--set", *_data(tiny_world, "data.dev_images=12")]
    assert tool("prefilter").main(argv) == 0
    assert "240 training pairs" in capsys.readouterr().out
    root = write_tiny_clip_world(tmp_path / "clip", 8, 16)
    argv = ["--cfg", "clip_synthetic", "--set", f"data.root={root}", "data.dev_images=6",
            "data.train_images=8", "data.noise_ratio=0.5", "model.clip.pretrained=random",
            "model.clip.context_length=24", "model.clip.image_size=16"]  # fmt: skip
    assert tool("prefilter").main(argv) == 2
    assert capsys.readouterr().err.startswith("error: the pre-filter needs region features")


def test_a_null_train_seed_is_drawn_and_printed(tool, tiny_world, capsys) -> None:
    """ugncl_flickr has train.seed: null (the README's command): the folds draw a seed, as a
    training run does, and the report names it."""
    argv = ["--cfg", "ugncl_synthetic", "--set", *_data(tiny_world, "data.dev_images=12"),
            "train.seed=null"]  # fmt: skip
    assert tool("prefilter").main(argv) == 0
    out = capsys.readouterr().out
    assert "train.seed is null: the folds drew seed" in out and "240 training pairs" in out


@pytest.mark.parametrize("tool_name", ["prefilter", "make_noise"])
def test_a_negative_seed_is_refused(tool, tool_name, capsys) -> None:
    argv = ["--cfg", "ugncl_synthetic"] if tool_name == "prefilter" else ["--name", "x"]
    with pytest.raises(SystemExit) as exc:
        tool(tool_name).main([*argv, "--seed", "-5"])
    assert exc.value.code == 2
    assert "--seed: -5 is outside [0, 2**32)" in capsys.readouterr().err
