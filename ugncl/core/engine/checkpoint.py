"""Plain-dict checkpoints: atomic writes, strict loads with errors that say what to do.

Errors are the package's one :class:`~precomputed.errors.CheckpointError` (a ``UserError``),
raised by :func:`sgraf.checkpoint.read_torch_file` for unreadable files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from precomputed._io import atomic_open
from precomputed.errors import CheckpointError
from sgraf.checkpoint import read_torch_file

__all__ = [
    "CHECKPOINT_VERSION",
    "CheckpointError",
    "clean_partial_files",
    "copy_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
]

CHECKPOINT_VERSION = 1


def save_checkpoint(state: dict[str, Any], path: str | Path) -> Path:
    """Write ``state`` to ``path`` via a temp file in the same folder and ``os.replace``.

    A crash mid-write leaves the previous file intact, never a truncated one.
    """
    path = Path(path)
    with atomic_open(path, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    return path


def copy_checkpoint(source: str | Path, path: str | Path) -> Path:
    """Atomically make ``path`` a byte copy of the checkpoint ``source``."""
    path = Path(path)
    with open(source, "rb") as src, atomic_open(path, "wb") as handle:
        shutil.copyfileobj(src, handle)
        handle.flush()
        os.fsync(handle.fileno())
    return path


def clean_partial_files(folder: str | Path) -> list[Path]:
    """Delete temp files that an interrupted :func:`save_checkpoint` left (``.<name>.*.tmp``)."""
    removed = []
    for tmp in Path(folder).glob(".*.tmp"):
        if tmp.is_file():
            tmp.unlink()
            removed.append(tmp)
    return removed


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a plain-dict checkpoint with ``weights_only=True`` (no code from the file runs).

    Raises:
        CheckpointError: the file is missing, a directory, truncated/corrupt, holds pickled
            objects, or is not a checkpoint of this package.
    """
    state = read_torch_file(path, map_location=map_location)
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(
            f"checkpoint {path} is not a checkpoint of this package (expected a dict with a "
            "'model' entry); convert released checkpoints with tools/convert_checkpoint.py"
        )
    return state
