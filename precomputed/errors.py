"""The package's one error hierarchy for problems a user can fix.

Every exception here is a :class:`UserError`: its message names the file or setting, the
problem and the fix, and the tools turn it into one ``error: ...`` line and exit code 2
(``ugncl.run.cli.cli_main``). It lives in the leaf package ``precomputed`` (no imports) so
that
``sgraf`` and ``ugncl`` can both raise and catch the same classes without breaking the
dependency direction ``tools -> ugncl -> sgraf, precomputed``.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "CheckpointNotFoundError",
    "DataFormatError",
    "DataNotFoundError",
    "InvalidSettingError",
    "UserError",
]


class UserError(Exception):
    """Bad input the user can fix (a file, a setting); the message says what and how."""


class DataNotFoundError(UserError, FileNotFoundError):
    """A dataset file or folder is missing (the message lists every path tried)."""

    def __str__(self) -> str:  # FileNotFoundError(msg) prints only msg; keep it that way
        return str(self.args[0]) if self.args else ""


class DataFormatError(UserError, ValueError):
    """A dataset file exists but its content is not what the layout promises."""


class InvalidSettingError(UserError, ValueError):
    """A setting (noise ratio, captions per image, split name...) has an invalid value."""


class CheckpointError(UserError, ValueError):
    """A checkpoint file is missing, unreadable, or not in a known layout (sgraf model files,
    released SGRAF/NCR/UGNCL containers and trainer checkpoints alike)."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint file at the given path."""


class MissingDataError(DataNotFoundError):
    """Data a config points to is not there; the message lists what was looked for."""
