"""What each method's reading switch changes: a config resolved at ``paper``, ``release`` and
``package`` and the keys whose resolved values differ (``tools/readings.py``).

The lists are computed from the resolved configs, so they follow the readings' declarations
(each method section's ``READINGS``) and the track bases a config stands on; a key the named
config states itself is the same in every reading and never listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ugncl.methods import METHODS
from ugncl.methods.readings import READING_NAMES
from ugncl.run.config import flat_tree, load_config

__all__ = ["ReadingDiff", "methods_with_readings", "reading_diff", "resolved_values"]


@dataclass(frozen=True)
class ReadingDiff:
    """One method's readings on one config.

    Attributes:
        method: the method's registry name.
        config: the config resolved.
        rows: ``(key, {reading: value})`` for every key whose value differs between readings,
            in the config's key order.
        notes: ``{reading: text}``, what a reading decides inside the method beyond config keys
            (the section's ``READING_NOTES``; empty where every difference is a key).
    """

    method: str
    config: str
    rows: tuple[tuple[str, dict[str, Any]], ...]
    notes: dict[str, str]

    def keys_between(self, a: str, b: str) -> list[str]:
        """The keys where readings ``a`` and ``b`` differ."""
        return [key for key, values in self.rows if values[a] != values[b]]


def methods_with_readings() -> list[str]:
    """Registry names of the methods whose config section declares readings."""
    return [
        name
        for name, spec in METHODS.items()
        if getattr(getattr(spec, "config", None), "READINGS", None)
    ]


def resolved_values(config: Any) -> dict[str, Any]:
    """Every dotted leaf key of a resolved config and its value."""
    return flat_tree(config.to_dict())


def reading_diff(method: str, config: str, overrides: tuple[str, ...] = ()) -> ReadingDiff:
    """Resolve ``config`` with ``method.name=<method>`` at each reading and list the keys whose
    values differ (the reading key itself left out)."""
    switch = f"method.{method}.reading"
    values = {
        reading: resolved_values(
            load_config(config, (*overrides, f"method.name={method}", f"{switch}={reading}"))[0]
        )
        for reading in READING_NAMES
    }
    first = values[READING_NAMES[0]]
    rows = tuple(
        (key, {reading: values[reading][key] for reading in READING_NAMES})
        for key in first
        if key != switch and len({repr(values[r][key]) for r in READING_NAMES}) > 1
    )
    notes = getattr(METHODS[method].config, "READING_NOTES", {})
    return ReadingDiff(method, config, rows, dict(notes))
