"""Config keys and values that earlier versions of the package wrote under other names.

A run folder's ``config.yaml`` (and a checkpoint's saved config) from an earlier version names
the pre-filter ``method.ugncl.seed*`` and the plain InfoNCE fine-tune ``clip``; both were
renamed (the pre-filter became a run-level switch any method can use, ``prefilter.*``; the
method name ``clip`` collided with the backbone's). :func:`upgrade_tree` rewrites such a tree
to today's names, so an earlier run resumes and compares, and says what it rewrote.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["RENAMED_KEYS", "RENAMED_METHODS", "upgrade_tree"]

logger = logging.getLogger(__name__)

#: Old dotted key -> today's dotted key.
RENAMED_KEYS: dict[str, str] = {
    "method.ugncl.seed": "prefilter.kind",
    "method.ugncl.seed_alpha": "prefilter.alpha",
    "method.ugncl.seed_fdr": "prefilter.fdr",
    "method.ugncl.seed_epochs": "prefilter.epochs",
    "method.clip.train_pairs": "method.infonce.train_pairs",
}
#: Old ``method.name`` -> today's.
RENAMED_METHODS: dict[str, str] = {"clip": "infonce"}


def _pop_dotted(tree: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    *parents, leaf = dotted.split(".")
    node: Any = tree
    for part in parents:
        node = node.get(part) if isinstance(node, Mapping) else None
    if not isinstance(node, dict) or leaf not in node:
        return False, None
    value = node.pop(leaf)
    return True, value


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for part in parents:
        node = node.setdefault(part, {})
    node.setdefault(leaf, value)  # a tree that states both names keeps today's


def upgrade_tree(tree: Mapping[str, Any], where: str = "config") -> dict[str, Any]:
    """``tree`` with the earlier names rewritten to today's (a copy; logs each rewrite).

    A tree that states both an old key and its new name keeps the new one. Empty sections an
    old key leaves behind are removed.
    """
    out = copy.deepcopy(dict(tree))
    for old, new in RENAMED_KEYS.items():
        found, value = _pop_dotted(out, old)
        if found:
            _set_dotted(out, new, value)
            logger.warning("%s: %s is now %s (rewritten)", where, old, new)
    method = out.get("method")
    if isinstance(method, dict):
        if method.get("clip") == {}:
            method.pop("clip")
        name = method.get("name")
        if isinstance(name, str) and name in RENAMED_METHODS:
            method["name"] = RENAMED_METHODS[name]
            logger.warning("%s: method.name %s is now %s (rewritten)", where, name, method["name"])
    return out
