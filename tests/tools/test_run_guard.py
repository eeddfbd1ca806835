"""A run with results is never trained again by ``--resume`` without ``--restart``, and a run
folder is used by one process at a time (``run.lock``: a live holder is refused by name, a
dead one on this host is taken over with a warning)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ugncl.core.engine import runlock
from ugncl.core.engine.recorder import read_metrics

pytestmark = pytest.mark.usefixtures("keep_threads")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_world: Path) -> Path:
    """A one-epoch triplet run with its best.pt and test record (trained once per module)."""
    from tests.conftest import load_tool, tiny_run_argv

    out = tmp_path_factory.mktemp("guard")
    assert load_tool("train").main(tiny_run_argv(tiny_world, out, "done")) == 0
    return out / "done"


def _copy(run: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(run, dest)
    return dest


def test_a_finished_run_is_not_trained_again_without_restart(
    finished_run: Path, tool, tmp_path: Path, capsys
) -> None:
    run = _copy(finished_run, tmp_path / "run")
    assert not (run / runlock.LOCK_NAME).exists()  # released at the end of the run
    (run / "checkpoints" / "last.pt").unlink()  # how people save disk
    best = (run / "checkpoints" / "best.pt").read_bytes()
    metrics = (run / "metrics.jsonl").read_text()
    train = tool("train").main
    assert train(["--resume", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "best.pt" in err[0] and "test record" in err[0] and "--restart" in err[0]
    assert (run / "checkpoints" / "best.pt").read_bytes() == best
    assert (run / "metrics.jsonl").read_text() == metrics
    assert not (run / runlock.LOCK_NAME).exists()
    # A test record alone (best.pt deleted too) is kept the same way.
    (run / "checkpoints" / "best.pt").unlink()
    assert train(["--resume", str(run)]) == 2
    assert "test record" in capsys.readouterr().err
    # --restart trains it again from epoch 0, with a new test record and checkpoints.
    assert train(["--resume", str(run), "--restart"]) == 0
    events = [r["event"] for r in read_metrics(run)]
    assert events.count("test") == 1 and events.count("setup") == 1
    assert (run / "checkpoints" / "best.pt").is_file()
    assert (run / "checkpoints" / "last.pt").is_file()


def test_restart_needs_resume(tool, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        tool("train").main(["--cfg", "triplet_synthetic", "--restart"])
    assert exc.value.code == 2
    assert "--restart goes with --resume" in capsys.readouterr().err


def test_a_folder_held_by_a_live_process_is_refused(
    finished_run: Path, tool, tmp_path: Path, capsys
) -> None:
    run = _copy(finished_run, tmp_path / "held")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = {"pid": holder.pid, "host": socket.gethostname(), "since": "2026-01-01T00:00"}
        assert runlock.write_lock(run, record)
        assert tool("train").main(["--resume", str(run), "--set", "train.epochs=2"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ")
        assert f"process {holder.pid}" in err[0] and socket.gethostname() in err[0]
        assert "2026-01-01T00:00" in err[0]
        assert json.loads((run / runlock.LOCK_NAME).read_text()) == record  # left alone
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_lock_is_taken_over_with_a_warning(
    finished_run: Path, tool, tmp_path: Path, caplog
) -> None:
    run = _copy(finished_run, tmp_path / "stale")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a dead pid on this host (a kill -9)
    record = {"pid": gone.pid, "host": socket.gethostname(), "since": "2026-01-01T00:00"}
    assert runlock.write_lock(run, record)
    assert tool("train").main(["--resume", str(run)]) == 0  # finished: nothing to do
    assert "stale lock" in caplog.text and str(gone.pid) in caplog.text
    assert not (run / runlock.LOCK_NAME).exists()


def test_lock_of_another_host_is_not_stale(tmp_path: Path) -> None:
    record = {"pid": os.getpid() + 10**7, "host": "elsewhere.invalid", "since": "x"}
    assert runlock.write_lock(tmp_path, record)
    assert not runlock.write_lock(tmp_path)  # exists: not replaced
    with pytest.raises(runlock.RunLockedError, match="elsewhere.invalid.*delete"):
        runlock.acquire(tmp_path)
    (tmp_path / runlock.LOCK_NAME).write_text("{torn")  # names nobody: stale
    runlock.acquire(tmp_path)
    assert runlock.read_holder(tmp_path)["pid"] == os.getpid()
    runlock.release(tmp_path)
    assert runlock.read_holder(tmp_path) is None
