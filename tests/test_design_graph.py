"""The layer drawing of ``docs/design.md`` is the code's: every arrow drawn is an import
between those rooms, and every import between rooms is drawn."""

from __future__ import annotations

import re
from pathlib import Path

from tests.ugncl.run.test_import_graph import import_graph, room_edges

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"


def drawn_edges(text: str) -> set[tuple[str, str]]:
    """The ``a -> b`` lines of the fenced block after the ``<!-- import-graph -->`` marker."""
    block = re.search(r"<!-- import-graph -->\s*```\n(.*?)```", text, re.S)
    assert block, "docs/design.md has no import-graph block"
    edges = set()
    for line in block.group(1).splitlines():
        if line.strip():
            source, _, target = line.partition("->")
            edges.add((source.strip(), target.strip()))
    return edges


def test_the_design_page_draws_the_imports_the_code_has() -> None:
    drawn = drawn_edges(DESIGN.read_text())
    actual = room_edges(import_graph())
    assert drawn - actual == set(), f"drawn but not imported: {sorted(drawn - actual)}"
    assert actual - drawn == set(), f"imported but not drawn: {sorted(actual - drawn)}"


def test_a_missing_arrow_is_seen() -> None:
    text = DESIGN.read_text().replace("ugncl.run -> ugncl.methods\n", "")
    assert ("ugncl.run", "ugncl.methods") not in drawn_edges(text)
