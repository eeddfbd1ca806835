"""Progress: a whole-run ETA in the training log and progress lines on long passes."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import ugncl.core.evaluation as evaluation
from ugncl.core.engine.trainer import Trainer, _clock


def test_run_eta_counts_the_remaining_epochs() -> None:
    trainer = SimpleNamespace(total_epochs=5, stop_after_epochs=None, _epoch_seconds=[])
    # Before an epoch has completed: the remaining epochs at this epoch's step time.
    assert Trainer.run_eta(trainer, 0, 8.0, 10.0) == 8.0 + 4 * 10.0
    trainer._epoch_seconds = [10.0, 20.0]  # then at the mean wall time of finished epochs
    assert Trainer.run_eta(trainer, 2, 5.0, 99.0) == 5.0 + 2 * 15.0
    trainer.stop_after_epochs = 3  # this invocation stops after its third epoch
    assert Trainer.run_eta(trainer, 2, 5.0, 99.0) == 5.0
    assert _clock(3723) == "1h02m03s" and _clock(63) == "1m03s" and _clock(4.4) == "4s"


def test_long_pass_logs_progress(monkeypatch, caplog) -> None:
    monkeypatch.setattr(evaluation, "PROGRESS_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger=evaluation.__name__):
        progress = evaluation.PassProgress("encoding f30k/test", 200)
        progress.update(50)
        progress.update(150)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("encoding f30k/test: 50/200 (25%), eta ")
    assert lines[1].startswith("encoding f30k/test: 150/200 (75%)")


def test_short_pass_is_silent(caplog) -> None:
    with caplog.at_level(logging.INFO, logger=evaluation.__name__):
        evaluation.PassProgress("encoding x/dev", 10).update(10)
    assert not caplog.records


def test_open_clip_root_info_lines_are_dropped() -> None:
    from ugncl.core.engine.recorder import _drop_library_root_info

    def record(name: str, level: int, path: str) -> logging.LogRecord:
        return logging.LogRecord(name, level, path, 1, "Loaded ugncl-tiny model config.", (), None)

    assert not _drop_library_root_info(record("root", logging.INFO, "/x/open_clip/factory.py"))
    assert _drop_library_root_info(record("root", logging.WARNING, "/x/open_clip/factory.py"))
    assert _drop_library_root_info(record("ugncl.x", logging.INFO, "/x/ugncl/x.py"))
