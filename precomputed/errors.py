"""Exceptions of the data layer: each message names the problem, the path/value and the fix."""

from __future__ import annotations

__all__ = ["DataFormatError", "DataNotFoundError"]


class DataNotFoundError(FileNotFoundError):
    """A dataset file or folder is missing (the message lists every path tried)."""

    def __str__(self) -> str:  # FileNotFoundError(msg) prints only msg; keep it that way
        return str(self.args[0]) if self.args else ""


class DataFormatError(ValueError):
    """A dataset file exists but its content is not what the layout promises."""
