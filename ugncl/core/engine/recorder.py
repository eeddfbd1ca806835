"""Run directory, human log, ``metrics.jsonl`` records and TensorBoard scalars."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from precomputed._io import atomic_open
from precomputed.errors import UserError

logger = logging.getLogger(__name__)

_HANDLER_TAG = "_ugncl_run_handler"


class RunDirExistsError(UserError, FileExistsError):
    """The run directory already holds a run; resume it or choose another name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def check_new_run_dir(run_dir: Path) -> None:
    """Refuse a run directory that exists and is not empty (before any work is done)."""
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise RunDirExistsError(
            f"run directory {run_dir} already holds a run; pass --resume {run_dir} to continue "
            "it, or choose another name with --set run.name=..."
        )


def create_run_dir(
    out_dir: str | Path, name: str, *, populate: Callable[[Path], None] | None = None
) -> Path:
    """Create ``out_dir/name`` with ``checkpoints/``; refuse to overwrite an existing run.

    The directory appears complete or not at all: it is built under a temporary name,
    ``populate(tmp_dir)`` writes its first files (``config.yaml``), then it is renamed. So a
    run directory always holds its config and ``--resume`` can continue it.
    """
    run_dir = Path(out_dir) / name
    check_new_run_dir(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=run_dir.parent, prefix=f".{name}.", suffix=".partial"))
    try:
        (tmp / "checkpoints").mkdir()
        if populate is not None:
            populate(tmp)
        if run_dir.is_dir():
            run_dir.rmdir()  # empty (checked above); rename needs it gone
        os.rename(tmp, run_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return run_dir


def truncate_metrics(run_dir: str | Path, keep: Callable[[dict[str, Any]], bool]) -> int:
    """Rewrite ``metrics.jsonl`` with the records ``keep`` accepts (a torn last line is
    dropped too); returns the number of records dropped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the write a kill interrupted
            dropped += 1
            continue
        if keep(record):
            kept.append(line)
        else:
            dropped += 1
    with atomic_open(path, "w", encoding="utf-8") as handle:
        handle.write("".join(f"{line}\n" for line in kept))
    return dropped


def setup_logging(log_file: Path | None, level: int = logging.INFO) -> None:
    """Console + file handlers on the root logger; replaces handlers from an earlier call.

    Also drops a plain console handler that ``logging.basicConfig`` installed before this
    call (a module-level ``logging.info`` in an imported library, e.g. open_clip's model
    factory, installs one): it would print every line a second time, unformatted.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        ours = getattr(handler, _HANDLER_TAG, False)
        implicit = type(handler) is logging.StreamHandler and handler.stream in (
            sys.stderr,
            sys.stdout,
        )
        if ours or implicit:
            root.removeHandler(handler)
            if ours:
                handler.close()
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if log_file is not None:
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    for handler in handlers:
        handler.setFormatter(fmt)
        handler.addFilter(_drop_library_root_info)
        setattr(handler, _HANDLER_TAG, True)
        root.addHandler(handler)
    root.setLevel(level)


def _drop_library_root_info(record: logging.LogRecord) -> bool:
    """Drop a library's INFO lines sent through the root logger (open_clip's factory logs
    ``Loaded ... model config`` and the like with ``logging.info``, ~7 lines per run)."""
    if record.name == "root" and record.levelno <= logging.INFO:
        return "open_clip" not in record.pathname
    return True


class MetricsRecorder:
    """Appends one JSON object per event to ``metrics.jsonl`` and mirrors numbers to TensorBoard.

    Records (the contract other tools read): ``division``, ``train``, ``val``, ``test``, plus
    ``setup`` (seed, noise sha256) at the start of a run.
    """

    def __init__(
        self, run_dir: Path, *, tensorboard: bool = True, purge_step: int | None = None
    ) -> None:
        """``purge_step``: TensorBoard drops the events at steps >= it (a resumed run
        rewrites the steps its killed attempt had written)."""
        self.path = run_dir / "metrics.jsonl"
        self._file = self.path.open("a", encoding="utf-8")
        self._tb = _open_tensorboard(run_dir / "tb", purge_step) if tensorboard else None

    def write(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one record; TensorBoard x-axis = ``step`` if given, else ``epoch``."""
        record = {"event": event, **{k: _plain(v) for k, v in fields.items()}}
        record["time"] = round(time.time(), 3)
        # The process's CPU seconds so far: a run's compute, whatever else shares the machine
        # (the comparison's cost column; ugncl.run.compare.cpu_seconds).
        record["cpu"] = round(time.process_time(), 3)
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            tb_step = int(fields.get("step", fields.get("epoch", 0)))
            for key, value in fields.items():
                if key in {"epoch", "step"} or not isinstance(value, (int, float)):
                    continue
                if isinstance(value, bool) or not math.isfinite(float(value)):
                    continue
                tag = f"{fields['split']}/{key}" if "split" in fields else f"{event}/{key}"
                self._tb.add_scalar(tag, float(value), tb_step)
        return record

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All records of a run's ``metrics.jsonl``."""
    path = Path(run_dir) / "metrics.jsonl"
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _open_tensorboard(path: Path, purge_step: int | None = None):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is an install dependency; stay usable without it
        logger.warning("tensorboard is not installed; %s will not be written", path)
        return None
    return SummaryWriter(log_dir=str(path), purge_step=purge_step)
