"""Run directory, human log, ``metrics.jsonl`` records and TensorBoard scalars."""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_HANDLER_TAG = "_ugncl_run_handler"


class RunDirExistsError(FileExistsError):
    """The run directory already holds a run; resume it or choose another name."""


def create_run_dir(out_dir: str | Path, name: str, *, resume: bool = False) -> Path:
    """Create ``out_dir/name`` with ``checkpoints/``; refuse to overwrite an existing run."""
    run_dir = Path(out_dir) / name
    if run_dir.exists() and any(run_dir.iterdir()) and not resume:
        raise RunDirExistsError(
            f"run directory {run_dir} already holds a run; pass --resume {run_dir} to continue "
            "it, or choose another name with --set run.name=..."
        )
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    return run_dir


def setup_logging(log_file: Path | None, level: int = logging.INFO) -> None:
    """Console + file handlers on the root logger; replaces handlers from an earlier call."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_TAG, False):
            root.removeHandler(handler)
            handler.close()
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if log_file is not None:
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    for handler in handlers:
        handler.setFormatter(fmt)
        setattr(handler, _HANDLER_TAG, True)
        root.addHandler(handler)
    root.setLevel(level)


class MetricsRecorder:
    """Appends one JSON object per event to ``metrics.jsonl`` and mirrors numbers to TensorBoard.

    Records (the contract other tools read): ``division``, ``train``, ``val``, ``test``, plus
    ``setup`` (seed, noise sha256) at the start of a run.
    """

    def __init__(self, run_dir: Path, *, tensorboard: bool = True) -> None:
        self.path = run_dir / "metrics.jsonl"
        self._file = self.path.open("a", encoding="utf-8")
        self._tb = _open_tensorboard(run_dir / "tb") if tensorboard else None

    def write(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one record; TensorBoard x-axis = ``step`` if given, else ``epoch``."""
        record = {"event": event, **{k: _plain(v) for k, v in fields.items()}}
        record["time"] = round(time.time(), 3)
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


def _open_tensorboard(path: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is an install dependency; stay usable without it
        logger.warning("tensorboard is not installed; %s will not be written", path)
        return None
    return SummaryWriter(log_dir=str(path))
