"""The packages' import graph has no cycle and follows the layers: a static walk of every
``import`` statement in ``ugncl``, ``sgraf`` and ``precomputed``, the lazy ones inside functions
and the annotation-only ``if TYPE_CHECKING:`` ones included, so that a module can be read (and
replaced) from the leaves up. The core never imports a plug-in or the run room, methods never
import a backbone, backbones never import a method, and the data layer and the network import
nothing of ``ugncl``; the layer drawing of ``docs/design.md`` is checked against the same walk
(``tests/test_design_graph.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("ugncl", "sgraf", "precomputed")


def module_names() -> dict[str, Path]:
    """Every module of the packages: dotted name -> file (a package is its ``__init__``)."""
    names = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names[".".join(parts)] = path
    return names


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``name`` imports anywhere in its file (``from a import b`` names the
    module ``a.b`` when it is one, else ``a``)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]  # fmt: skip
        else:
            continue
        for target in targets:
            while target and target not in modules:  # ``import a.b.c`` names a.b.c's module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imported(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_walk_sees_lazy_and_relative_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    source = import_graph()
    assert "ugncl.run.config" in source and "sgraf.model" in " ".join(source)
    # training.py imports evaluation at module level; the walk must see it
    assert "ugncl.core.evaluation" in source["ugncl.run.training"]


def test_the_package_import_graph_has_no_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


if __name__ == "__main__":
    graph = import_graph()
    print(sum(len(v) for v in graph.values()), "edges among", len(graph), "modules")
    for component in cycles(graph):
        print(len(component), "modules:", " ".join(component))


# Which top-level rooms each room may import (itself always). A room is the longest prefix of a
# module's name listed here.
ROOMS = ("precomputed", "sgraf", "ugncl.core", "ugncl.backbones", "ugncl.methods", "ugncl.run")
ALLOWED = {
    "precomputed": set(),
    "sgraf": {"precomputed"},  # the shared error classes (precomputed.errors) only
    "ugncl.core": {"precomputed", "sgraf"},
    "ugncl.methods": {"precomputed", "sgraf", "ugncl.core"},
    "ugncl.backbones": {"precomputed", "sgraf", "ugncl.core"},
    "ugncl.run": {"precomputed", "sgraf", "ugncl.core", "ugncl.methods", "ugncl.backbones"},
}


def room(module: str) -> str | None:
    found = [r for r in ROOMS if module == r or module.startswith(r + ".")]
    return max(found, key=len) if found else None


def room_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """``(room, room)`` for every import between two rooms (package ``__init__`` files of
    ``ugncl`` itself belong to no room)."""
    edges = set()
    for source, targets in graph.items():
        for target in targets:
            a, b = room(source), room(target)
            if a and b and a != b:
                edges.add((a, b))
    return edges


def test_every_import_follows_the_layers() -> None:
    graph = import_graph()
    wrong = sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if room(source) and room(target) and room(target) != room(source)
        and room(target) not in ALLOWED[room(source)]
    )  # fmt: skip
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)
