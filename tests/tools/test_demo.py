"""tools/demo.py end to end on a tiny world: one table with every row, JSON, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TINY_WORLD = ["num_train=20", "num_dev=6", "num_test=6", "feature_dim=64", "seed=5"]


@pytest.fixture
def demo(tool):
    return tool("demo").main


def _tiny_sets(tiny_model: list[str]) -> list[str]:
    return [
        "data.train_images=null",
        "data.dev_images=6",
        "train.epochs=1",
        "train.warmup_epochs=1",
        "train.batch_size=10",
        "train.eval_batch_size=6",
        "method.ugncl.lambda_min=3",
        *tiny_model,
    ]


def test_demo_generates_the_world_and_prints_every_row(demo, tmp_path, tiny_model, capsys):
    root, out = tmp_path / "world", tmp_path / "runs"
    argv = ["--world-root", str(root), "--world", *TINY_WORLD, "--out", str(out), "--seed", "3",
            "--threads", "1", "--set", *_tiny_sets(tiny_model)]  # fmt: skip
    assert demo(argv) == 0
    printed = capsys.readouterr().out
    assert "generating the synthetic world" in printed
    for name in ("clean reference", "hinge 50% noise", "UGNCL 50% noise", "UGNCL paper 50% noise",
                 "oracle ceiling", "stronger noisy baseline: "):  # fmt: skip
        assert name in printed
    assert "triplet 50% noise" not in printed  # trains only when --only names it
    summary = json.loads((out / "demo_summary.json").read_text())
    assert summary["world"]["num_train"] == 20 and summary["world"]["seed"] == 5
    rows = {r["method"]: r for r in summary["rows"]}
    # UGNCL as the package reads it, and as the paper prints it (method.ugncl.reading=paper)
    assert set(rows) == {"clean reference", "hinge", "UGNCL", "UGNCL paper", "oracle ceiling"}
    assert rows["UGNCL"]["noisy_f1"] is not None and rows["hinge"]["noisy_f1"] is None
    assert set(summary["ratios"]) == {"clean/oracle", "UGNCL/clean", "UGNCL paper/clean",
                                      "UGNCL/hinge", "UGNCL/stronger noisy baseline"}  # fmt: skip
    best = "hinge"
    assert summary["stronger_noisy_baseline"] == best
    assert summary["ratios"]["UGNCL/stronger noisy baseline"] == pytest.approx(
        rows["UGNCL"]["rsum"] / rows[best]["rsum"]
    )
    hinge_cfg = (Path(rows["hinge"]["run_dir"]) / "config.yaml").read_text()
    assert "noise_ratio: 0.5" in hinge_cfg and "name: triplet" in hinge_cfg
    clean_cfg = (Path(rows["clean reference"]["run_dir"]) / "config.yaml").read_text()
    assert "noise_ratio: 0.0" in clean_cfg and "seed: 3" in clean_cfg
    # the short schedule is applied under --set (whose epochs win): UGNCL's lr step moved
    assert summary["schedule"] == "short" and "(short schedule)" in printed
    ugncl_cfg = (Path(rows["UGNCL"]["run_dir"]) / "config.yaml").read_text()
    assert "lr_update: 4" in ugncl_cfg
    paper_cfg = (Path(rows["UGNCL paper"]["run_dir"]) / "config.yaml").read_text()
    assert "reading: paper" in paper_cfg and "lr_update: 4" in paper_cfg
    # the same root with other settings is refused, not silently reused
    assert demo(["--world-root", str(root), "--world", "seed=6", "--out", str(tmp_path / "b")]) == 2
    assert "other settings" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--world", "colour=3"], "KNOB=VALUE"),
        (["--world", "seed=x"], "is not of type int"),
        (["--noise-ratio", "1.0"], "--noise-ratio"),
        (["--set", "train.nope=1"], "nope"),
        (["--jobs", "0"], "--jobs"),
    ],
)
def test_demo_bad_input_is_one_error_line(demo, tmp_path, argv, message, capsys):
    world = ["--world-root", str(tmp_path / "w"), "--world", *TINY_WORLD]
    assert demo([*world, "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err and "Traceback" not in err


def test_demo_jobs_train_rows_in_workers_with_the_same_results(demo, tmp_path, tiny_model, capsys):
    """--jobs 2 trains the rows in two spawned workers; a row depends on its seed and thread
    count only, so the table equals the sequential one."""
    root = tmp_path / "world"
    common = ["--world-root", str(root), "--world", *TINY_WORLD, "--seed", "3", "--threads", "1",
              "--only", "triplet", "ugncl", "--set", *_tiny_sets(tiny_model)]  # fmt: skip
    assert demo([*common, "--out", str(tmp_path / "seq")]) == 0
    assert demo([*common, "--out", str(tmp_path / "par"), "--jobs", "2"]) == 0
    assert "in a worker" in capsys.readouterr().out

    def rows(out: str) -> dict:
        summary = json.loads((tmp_path / out / "demo_summary.json").read_text())
        return {r["method"]: (r["rsum"], r["noisy_f1"]) for r in summary["rows"]}

    assert rows("seq") == rows("par")
    assert json.loads((tmp_path / "par" / "demo_summary.json").read_text())["jobs"] == 2


def test_demo_refuses_a_world_with_redrawn_nuisance(tool, tmp_path) -> None:
    """A copy made for the memorisation probe has the settings of its source but other
    images: the demo does not take it for the world it was asked for."""
    from precomputed.synthetic.writer import redraw_nuisance

    module = tool("demo")
    settings = module.world_settings(TINY_WORLD)
    module.ensure_world(tmp_path / "w", settings)  # generates it
    module.ensure_world(tmp_path / "w", settings)  # the same world: accepted
    redraw_nuisance(tmp_path / "w", tmp_path / "r")
    with pytest.raises(ValueError, match="nuisance_redraw"):
        module.ensure_world(tmp_path / "r", settings)
