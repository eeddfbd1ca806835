"""``tools/readings.py``: what each method's reading switch sets, computed from the resolved
configs, and every such key named on the method's page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import readings as tool
from ugncl.methods.readings import READING_NAMES
from ugncl.methods.ugncl.method import UGNCLConfig
from ugncl.run.readings_table import methods_with_readings, reading_diff

REPO = Path(__file__).resolve().parents[2]
PAGES = {
    "ugncl": "ugncl.md", "npc": "weighted.md", "sdd": "weighted.md", "osa": "weighted.md",
    "ncr": "ncr.md", "decl": "decl.md",
}  # fmt: skip


def test_every_method_with_readings_has_a_page() -> None:
    assert set(methods_with_readings()) <= set(PAGES)


def test_ugncl_readings_list_the_keys_its_readings_declare() -> None:
    diff = reading_diff("ugncl", "ugncl_synthetic")
    rows = dict(diff.rows)
    for reading in ("paper", "release"):
        for key, value in UGNCLConfig.READINGS[reading].items():
            if key in rows:  # a key the config does not state itself
                assert rows[key][reading] == value or str(rows[key][reading]) == str(value)
    assert rows["method.ugncl.evidence"] == {"package": "tanh", "paper": "softplus",
                                             "release": "softplus"}  # fmt: skip
    assert rows["prefilter.kind"]["paper"] == "none"
    assert "method.ugncl.reading" not in rows
    assert all(len({repr(v[r]) for r in READING_NAMES}) > 1 for _, v in diff.rows)


def test_a_key_the_config_states_is_not_listed() -> None:
    """``--set`` states a key beside the reading: the same in every reading."""
    diff = reading_diff("ugncl", "ugncl_synthetic", ("method.ugncl.evidence=tanh",))
    assert "method.ugncl.evidence" not in dict(diff.rows)


def _suffixes(key: str) -> list[str]:
    """``a.b.c`` -> ``a.b.c``, ``b.c``, ``c``: the ways a page names a key in backticks."""
    parts = key.split(".")
    return [".".join(parts[i:]) for i in range(len(parts))]


@pytest.mark.parametrize("method", sorted(PAGES))
def test_every_key_a_reading_changes_is_named_on_the_methods_page(method: str) -> None:
    diff = reading_diff(method, tool.default_config(method))
    page = (REPO / "docs" / "methods" / PAGES[method]).read_text(encoding="utf-8")
    changed = {k for a in ("paper", "release") for k in diff.keys_between(a, "package")}
    missing = [k for k in sorted(changed) if not any(f"`{s}" in page for s in _suffixes(k))]
    assert not missing, f"{PAGES[method]} does not name {missing}"


def test_the_tool_prints_markdown_and_json(capsys) -> None:
    assert tool.main(["--methods", "ncr"]) == 0
    text = capsys.readouterr().out
    assert "### ncr (`ncr_synthetic`)" in text and "`train.amp` | `auto` | `off` | `off`" in text
    assert "noisy pairs' term from the start" in text  # the paper reading's in-method note
    assert tool.main(["--methods", "sdd", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sdd"]["keys"]["method.sdd.consistency_norm"]["paper"] == "none"


def test_a_method_without_readings_is_one_error_line(capsys) -> None:
    assert tool.main(["--methods", "triplet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "ugncl" in err[0]
