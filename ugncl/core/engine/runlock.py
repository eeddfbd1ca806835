"""One process at a time in a run folder: ``run.lock`` names its holder (pid, host, since).

Two ``--resume``s of one folder would both append to ``metrics.jsonl`` and replace each
other's checkpoints. The lock file is created atomically (written under a temporary name,
then hard-linked to ``run.lock``, which fails when the name exists), so a reader never sees a
half-written holder. A lock whose holder is a dead process on this host (a ``kill -9``, a lost
session) is stale: the next run takes it over with a warning. A holder on another host cannot
be checked from here; the error says how to remove the file when that run is known to be over.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from precomputed.errors import UserError

logger = logging.getLogger(__name__)

LOCK_NAME = "run.lock"


class RunLockedError(UserError):
    """Another live process holds the run folder."""


def holder_record() -> dict[str, Any]:
    """This process as a lock holder."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_lock(folder: Path, holder: dict[str, Any] | None = None) -> bool:
    """Create ``folder/run.lock`` naming ``holder`` (this process by default); False when a
    lock file is already there (nothing is changed then)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".run.lock.", suffix=".new")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(holder or holder_record(), handle)
        try:
            os.link(tmp, folder / LOCK_NAME)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def read_holder(folder: Path) -> dict[str, Any] | None:
    """The holder named by ``folder/run.lock``; None when there is no lock file."""
    try:
        text = (folder / LOCK_NAME).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(text)
    except json.JSONDecodeError:
        holder = None
    return holder if isinstance(holder, dict) else {}


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(holder: dict[str, Any]) -> bool:
    """A holder that is a dead process of this host (or a lock file that names nobody)."""
    pid, host = holder.get("pid"), holder.get("host")
    if not isinstance(pid, int) or not isinstance(host, str):
        return True
    return host == socket.gethostname() and not pid_alive(pid)


def acquire(folder: Path) -> None:
    """Take ``folder``'s lock for this process.

    Raises:
        RunLockedError: a live process (or one on another host) holds the folder.
    """
    for _ in range(3):  # a stale lock removed by another taker in between: try again
        if write_lock(folder):
            return
        holder = read_holder(folder)
        if holder is None:
            continue
        if holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
            return  # this process holds it already
        where = folder / LOCK_NAME
        if not is_stale(holder):
            raise RunLockedError(
                f"run folder {folder} is in use by process {holder.get('pid')} on host "
                f"{holder.get('host')} since {holder.get('since')} ({where}); wait for that "
                "run to end, or stop it. If it is known to be over (a host that went down), "
                f"delete {where} and run again"
            )
        logger.warning(
            "taking over the stale lock of %s: its holder, process %s on %s since %s, is gone",
            folder, holder.get("pid"), holder.get("host"), holder.get("since"),
        )  # fmt: skip
        with contextlib.suppress(FileNotFoundError):
            (folder / LOCK_NAME).unlink()
    raise RunLockedError(
        f"run folder {folder}: could not take its lock {folder / LOCK_NAME} (another process "
        "keeps taking it); run again"
    )


def release(folder: Path) -> None:
    """Remove ``folder``'s lock if this process holds it."""
    holder = read_holder(folder)
    if holder and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
        with contextlib.suppress(FileNotFoundError):
            (folder / LOCK_NAME).unlink()
