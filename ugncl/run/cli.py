"""The error contract of every tool: a :class:`~precomputed.errors.UserError` becomes one
``error: ...`` line on stderr and exit code 2, never a traceback.

Usage in ``tools/<name>.py``::

    @cli_main
    def main(argv: list[str] | None = None) -> int:
        ...

    if __name__ == "__main__":
        raise SystemExit(main())

Caught: :class:`UserError` (bad files, bad settings, unreadable checkpoints); an ``OSError``
that names a file the system refused (no permission, read-only or full disk, a folder where a
file should be: a path to fix, not a bug); a full disk or quota (``ENOSPC``, ``EDQUOT``) even
where the failed write names no file; a ``UnicodeDecodeError`` (a text file that is not
UTF-8). Ctrl-C (``KeyboardInterrupt``) prints one line and exits with 130 (128 + SIGINT, the
shell's code for an interrupted command) instead of a traceback; ``tools/train.py`` names the
``--resume`` command that continues the run. Any other exception is a bug and keeps its
traceback.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from precomputed.errors import UserError

__all__ = [
    "OutputPathError",
    "check_new_file",
    "check_writable",
    "cli_main",
    "error_line",
    "seed_argument",
]

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT

# OSErrors that mean "this path cannot be used", not "the program is wrong".
_PATH_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "EACCES",
        "EPERM",
        "EROFS",
        "ENOSPC",
        "EDQUOT",
        "EISDIR",
        "ENOTDIR",
        "ENAMETOOLONG",
        "ENOENT",
        "EEXIST",
        "ENOTEMPTY",
    )
    if hasattr(errno, name)
)

# A full disk or quota: the write that failed may name no file (a write() on an open file).
_FULL_ERRNOS = frozenset(
    getattr(errno, name) for name in ("ENOSPC", "EDQUOT") if hasattr(errno, name)
)


class OutputPathError(UserError, OSError):
    """An output file or folder cannot be written (checked before any work is done)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def check_writable(path: str | Path, what: str = "output") -> Path:
    """Make sure ``path`` (a file to write) can be written: its folder exists or can be
    created, and a file can be created in it. Call it before any heavy work.

    Raises:
        OutputPathError: naming the path, the system's reason and the fix.
    """
    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"{what} {path} is a folder; give a file path")
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as err:
        raise OutputPathError(
            f"cannot write {what} {path}: {err.strerror or err} ({err.filename or folder}); "
            "choose a folder you can write to"
        ) from err
    return path


def check_new_file(path: str | Path, force: bool, what: str = "output") -> Path:
    """:func:`check_writable`, and refuse to replace an existing file unless ``force``."""
    path = Path(path)
    if path.exists() and not force:
        raise OutputPathError(
            f"{what} {path} already exists; pass --force to replace it (runs trained on it "
            "would no longer match their recorded sha256), or choose another --out"
        )
    return check_writable(path, what)


def seed_argument(text: str) -> int:
    """An argparse ``type`` for a ``--seed``: an integer in [0, 2**32), the range every
    random generator the package seeds accepts (numpy's legacy one is the narrowest)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"{value} is outside [0, 2**32); give e.g. 0")
    return value


def error_line(err: BaseException) -> str:
    """``error: <message>`` on one line (newlines in the message become ``; ``).

    An error re-raised from a ``DataLoader`` worker carries the worker's whole traceback in
    its message; only its last line (the original message) is kept."""
    text = str(err)
    if "Original Traceback (most recent call last):" in text:
        last = [line for line in text.splitlines() if line.strip()][-1]
        match = re.match(r"^[\w.]+: (.*)$", last)  # "package.module.SomeError: message"
        text = match.group(1) if match else last
    message = "; ".join(part.strip() for part in text.splitlines() if part.strip())
    return f"error: {message or type(err).__name__}"


def cli_main(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Wrap a tool's ``main(argv)``: a ``UserError`` prints :func:`error_line`, returns 2."""

    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except UserError as err:
            print(error_line(err), file=sys.stderr)
            return EXIT_USER_ERROR
        except UnicodeDecodeError as err:
            print(
                f"error: a text file is not UTF-8 ({err.reason} at byte {err.start}); save it "
                "as UTF-8",
                file=sys.stderr,
            )
            return EXIT_USER_ERROR
        except OSError as err:
            if err.errno in _FULL_ERRNOS:  # a write into a full disk names no file
                where = f" ({os.fsdecode(err.filename)})" if err.filename is not None else ""
                print(
                    f"error: {err.strerror or 'no space left on device'}{where}; free space or "
                    "write to another folder (run.out_dir, --out). A training run continues "
                    "from its last saved epoch with python tools/train.py --resume RUN_DIR",
                    file=sys.stderr,
                )
                return EXIT_USER_ERROR
            if err.errno not in _PATH_ERRNOS or err.filename is None:
                raise
            where = os.fsdecode(err.filename)
            print(
                f"error: {where}: {err.strerror}; fix the path or its permissions "
                "(a folder you can write to for outputs, a readable file for inputs)",
                file=sys.stderr,
            )
            return EXIT_USER_ERROR
        except KeyboardInterrupt as err:  # a message, if any, says how to continue
            print(f"error: interrupted{f'; {err}' if str(err) else ''}", file=sys.stderr)
            return EXIT_INTERRUPTED

    return wrapped
