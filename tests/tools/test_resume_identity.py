"""The run's identity (config, noise index, vocabulary, weights files) is hashed into every
checkpoint; ``--resume`` refuses, by name, anything that changed underneath it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from precomputed.noise import save_noise_index
from tests.tools.test_train import tiny_overrides
from ugncl.core.engine.checkpoint import load_checkpoint


@pytest.fixture
def stopped_run(tool, tiny_world: Path, tmp_path: Path, tiny_model: list[str]):
    """A run of 2 epochs stopped after its first, trained on a noise file of its own."""
    train = tool("train").main
    noise = tmp_path / "noise.npy"
    first = tiny_overrides(tiny_world, tmp_path, "probe", tiny_model, "train.epochs=1",
                           "train.warmup_epochs=0", "data.train_images=16",
                           "eval.test_after_training=false")  # fmt: skip
    assert train(["--cfg", "ugncl_synthetic", "--set", *first]) == 0
    noise.write_bytes((tmp_path / "probe" / "noise_index.npy").read_bytes())
    overrides = tiny_overrides(tiny_world, tmp_path, "r", tiny_model, "train.epochs=2",
                               "train.warmup_epochs=0", "train.stop_after_epochs=1",
                               "data.train_images=16", f"data.noise_file={noise}")  # fmt: skip
    assert train(["--cfg", "ugncl_synthetic", "--set", *overrides]) == 0
    return train, tmp_path / "r", noise


@pytest.mark.slow
def test_resume_refuses_what_changed_underneath(stopped_run, capsys) -> None:
    train, run, noise = stopped_run
    state = load_checkpoint(run / "checkpoints" / "last.pt")
    assert {"config", "noise_index", "vocab"} <= set(state["identity"])
    capsys.readouterr()
    config_text = (run / "config.yaml").read_text()
    before = (run / "metrics.jsonl").read_text()

    # A hand-edited config.yaml: resume_changes sees no --set, the checkpoint does.
    edited = yaml.safe_load(config_text)
    edited["data"]["noise_ratio"] = 0.2
    (run / "config.yaml").write_text(yaml.safe_dump(edited, sort_keys=False))
    assert train(["--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --resume: data.noise_ratio is 0.2") and err.count("\n") == 1
    (run / "config.yaml").write_text(config_text)

    # The noise file replaced by another index of the same shape.
    original = noise.read_bytes()
    index = np.load(noise)
    save_noise_index(noise, np.roll(index, 1))
    assert train(["--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "the training noise index" in err and "changed since" in err
    noise.write_bytes(original)

    # Fewer epochs than the checkpoint has done: refused, config.yaml untouched.
    assert train(["--resume", str(run), "--set", "train.epochs=0"]) == 2
    assert "train.epochs=0" in capsys.readouterr().err
    assert (run / "config.yaml").read_text() == config_text
    assert (run / "metrics.jsonl").read_text() == before

    # Everything restored: the resume runs.
    assert train(["--resume", str(run), "--set", "train.stop_after_epochs=null"]) == 0
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records if r["event"] == "val"] == [0, 1]
