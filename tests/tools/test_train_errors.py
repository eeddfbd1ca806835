"""tools/train.py where a run used to end in a traceback or a misleading line: a non-finite
loss, a full disk, no epoch to train, a setup-only run, Ctrl-C during validation."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from ugncl.core.engine.recorder import read_metrics

pytestmark = pytest.mark.usefixtures("keep_threads")


@pytest.fixture
def train(tool, tiny_world: Path, tmp_path: Path):
    """``tools/train.py`` on the tiny world into ``tmp_path/<name>`` (triplet, one epoch)."""
    from tests.conftest import tiny_run_argv

    main = tool("train").main

    def run(name: str, *extra: str) -> int:
        return main(tiny_run_argv(tiny_world, tmp_path, name, *extra))

    return run


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    return lines[0]


def test_a_non_finite_loss_is_one_error_line_naming_the_key(train, capsys) -> None:
    assert train("nan", "train.lr=1e308") == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "non-finite" in line and "train.lr" in line and "run.name=NEW" in line


def test_a_full_disk_is_one_error_line(train, monkeypatch, tmp_path: Path, capsys) -> None:
    """A write into a full disk raises ENOSPC with no file name (here: the checkpoint)."""
    from ugncl.core.engine import trainer

    def full(state, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trainer, "save_checkpoint", full)
    assert train("full") == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "No space left on device" in line and "--resume" in line


def test_no_epoch_to_train_is_refused_before_the_folder(train, tmp_path: Path, capsys) -> None:
    assert train("zero", "train.epochs=0") == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "train.epochs=0 with train.warmup_epochs=0 trains no epoch" in line
    assert not (tmp_path / "zero").exists()


def test_a_setup_only_run_says_so(train, tmp_path: Path, capsys) -> None:
    """train.stop_after_epochs=0 (documented: set up and record, train nothing) reports the
    set-up run and how to train it, not 'best dev rsum -inf'."""
    assert train("setup", "train.stop_after_epochs=0") == 0
    out = capsys.readouterr().out
    assert "no epoch trained yet" in out and "-inf" not in out
    assert [r["event"] for r in read_metrics(tmp_path / "setup")] == ["setup"]


def test_ctrl_c_during_validation_names_the_saved_epochs(
    train, monkeypatch, tmp_path: Path, capsys
) -> None:
    """Interrupted while validating epoch 0: last.pt holds no epoch yet, so '0 of 1 done'."""
    from ugncl.core.engine.trainer import Trainer

    def interrupted(self, which, epoch, **extra):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "evaluate", interrupted)
    assert train("ctrl_c") == 130
    err = capsys.readouterr().err
    assert "(0 of 1 done)" in err and not (tmp_path / "ctrl_c" / "checkpoints" / "last.pt").exists()
