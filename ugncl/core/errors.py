"""The configuration error every layer raises (a leaf: backbones and methods import it without
importing the config loader, which imports their registries)."""

from __future__ import annotations

from precomputed.errors import UserError

__all__ = ["ConfigError", "UserError"]


class ConfigError(UserError, ValueError):
    """A config file, key or value is wrong; the message says which and how to fix it."""
