"""UGNCL's readings: ``paper``, ``release`` and ``package`` each resolve to the keys they list,
and the keys where ``paper`` and ``release`` depart from ``package`` are exactly the rows of
the readings table in docs/methods/ugncl.md, with the values it prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ugncl.methods.ugncl.method import UGNCLConfig, UGNCLMethod
from ugncl.run.config import flat_tree, load_config, parse_scalar

DOC = Path(__file__).resolve().parents[4] / "docs" / "methods" / "ugncl.md"
READINGS = ("paper", "release", "package")


@pytest.fixture(scope="module")
def resolved(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Each reading of a config that states nothing but the method (base.yaml below it)."""
    cfg = tmp_path_factory.mktemp("readings") / "ugncl.yaml"
    cfg.write_text("method:\n  name: ugncl\n", encoding="utf-8")
    return {
        reading: flat_tree(load_config(cfg, [f"method.ugncl.reading={reading}"])[0].to_dict())
        for reading in READINGS
    }


def _documented() -> dict[str, dict[str, Any]]:
    """``{key: {reading: value}}`` from the table under "## Readings" of the methods page."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Readings", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        key = cells[0].strip("`")
        values = [parse_scalar(c.replace("`", "")) for c in cells[2:5]]
        rows[key] = dict(zip(READINGS, values))
    return rows


@pytest.mark.parametrize("reading", READINGS)
def test_each_reading_resolves_to_the_keys_it_lists(resolved, reading: str) -> None:
    values = resolved[reading]
    assert values["method.ugncl.reading"] == reading
    for key, value in UGNCLConfig.READINGS[reading].items():
        assert values[key] == value, key
    UGNCLMethod(UGNCLConfig(**{k.split(".")[-1]: v for k, v in values.items()
                               if k.startswith("method.ugncl.")}))  # fmt: skip


def test_paper_and_release_differ_from_package_exactly_where_the_page_says(resolved) -> None:
    documented = _documented()
    package = resolved["package"]
    for reading in ("paper", "release"):
        differs = {k for k, v in resolved[reading].items() if v != package[k]}
        differs.discard("method.ugncl.reading")
        listed = {k for k, row in documented.items() if row[reading] != row["package"]}
        assert differs == listed, reading
    for key, row in documented.items():  # every value the page prints is the resolved one
        for reading in READINGS:
            assert resolved[reading][key] == row[reading], (key, reading)
    # The pre-filter is off in every reading but the package's.
    assert [resolved[r]["prefilter.kind"] for r in READINGS] == ["none", "none", "linear"]


def test_the_paper_s_lambda_moves_once_per_epoch() -> None:
    """Eq. 16 as printed: ``lambda = max(floor(K - delta * epoch), theta)``, delta 0.25, the
    epoch index (warm-up included), whatever the optimiser step."""
    method = UGNCLMethod(lambda_clock="epoch", lambda_delta=0.25)
    assert method.hardness(128, global_step=10_000, epoch=0) == 127  # at most K - 1 rivals
    assert method.hardness(128, global_step=0, epoch=8) == 126
    assert method.hardness(128, global_step=99, epoch=8) == 126
    assert method.hardness(128, global_step=0, epoch=39) == 118
    assert method.hardness(8, global_step=0, epoch=100) == 5  # theta
    per_step = UGNCLMethod(lambda_clock="global")
    assert per_step.hardness(128, global_step=400, epoch=0) == 118
