"""The error contract of every tool: a :class:`~precomputed.errors.UserError` becomes one
``error: ...`` line on stderr and exit code 2, never a traceback.

Usage in ``tools/<name>.py``::

    @cli_main
    def main(argv: list[str] | None = None) -> int:
        ...

    if __name__ == "__main__":
        raise SystemExit(main())

Only :class:`UserError` (bad files, bad settings, unreadable checkpoints) is caught; any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

from precomputed.errors import UserError

__all__ = ["cli_main", "error_line"]

EXIT_USER_ERROR = 2


def error_line(err: BaseException) -> str:
    """``error: <message>`` on one line (newlines in the message become ``; ``)."""
    message = "; ".join(part.strip() for part in str(err).splitlines() if part.strip())
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

    return wrapped
