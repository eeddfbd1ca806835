"""Plain-dict checkpoints: atomic writes, strict loads with errors that say what to do."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import torch

from precomputed._io import atomic_open

CHECKPOINT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated or not in a known layout."""


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


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a plain-dict checkpoint with ``weights_only=True``.

    Raises:
        CheckpointError: the file is missing, truncated/corrupt, or holds pickled objects.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    size = path.stat().st_size
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as err:
        raise CheckpointError(
            f"checkpoint {path} ({size} bytes) is truncated or corrupt and cannot be read "
            f"({type(err).__name__}: {err}). Use the other checkpoint of the run "
            "(checkpoints/last.pt or best.pt) or re-run training."
        ) from err
    except Exception as err:  # pickle.UnpicklingError for pickled objects such as Namespace
        raise CheckpointError(
            f"checkpoint {path} holds objects that are not plain tensors/containers "
            f"({err}). Released SGRAF/NCR/UGNCL checkpoints must be converted first: "
            f"python tools/convert_checkpoint.py {path} OUT.pt"
        ) from err
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(
            f"checkpoint {path} is not a checkpoint of this package (expected a dict with a "
            "'model' entry); convert released checkpoints with tools/convert_checkpoint.py"
        )
    return state
