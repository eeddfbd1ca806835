"""tools/write_results.py: the README and docs result blocks written from small fake run
records, stamped with the commit and the reference step, a hand edit between the markers
detected and overwritten; the demo's rows are data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ugncl.run.config import all_keys
from ugncl.run.results_block import BlockError, edited_blocks, replace_block

DOC = """# Title

Prose above.

<!-- results:demo:begin sha256= -->
old numbers
<!-- results:demo:end -->

<!-- results:compare:begin sha256= -->
<!-- results:compare:end -->

Prose below.
"""


def _demo_folder(root: Path) -> Path:
    summary = {
        "world_root": "data/synthetic", "noise_ratio": 0.5, "seed": 0, "threads": 1, "jobs": 2,
        "schedule": "short", "total_minutes": 7.25,
        "rows": [
            {"method": "clean reference", "noisy": False, "rsum": 439.2, "i2t/R@1": 70.4,
             "t2i/R@1": 38.7, "noisy_f1": None, "minutes": 2.9},
            {"method": "UGNCL", "noisy": True, "rsum": 429.9, "i2t/R@1": 68.0,
             "t2i/R@1": 36.6, "noisy_f1": 0.904, "minutes": 6.8},
        ],
        "ratios": {"UGNCL/clean": 429.9 / 439.2},
    }  # fmt: skip
    folder = root / "demo"
    folder.mkdir()
    (folder / "demo_summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return folder


def _compare_folder(root: Path) -> Path:
    folder = root / "compare"
    folder.mkdir()
    (folder / "compare.json").write_text(json.dumps({"groups": [], "runs": [{}, {}]}))
    md = ("# Report\n\n## Mean over seeds\n\n| model | method |\n|---|---|\n| sgraf (SGR) | "
          "hinge |\n\n## Claims\n\n- a claim.\n\n## What drives the gain\n\n- `ugncl+pf`: "
          "+10.0 rSum.\n\n## Runs\n\nnot copied\n")  # fmt: skip
    (folder / "compare.md").write_text(md, encoding="utf-8")
    return folder


@pytest.fixture
def docs(tmp_path: Path) -> tuple[Path, Path]:
    readme, page = tmp_path / "README.md", tmp_path / "comparison.md"
    readme.write_text(DOC, encoding="utf-8")
    page.write_text(DOC.replace("<!-- results:demo:begin sha256= -->\nold numbers\n"
                                "<!-- results:demo:end -->\n", ""), encoding="utf-8")  # fmt: skip
    return readme, page


def test_blocks_are_written_from_records_and_hand_edits_detected(tool, tmp_path, docs, capsys):
    readme, page = docs
    main = tool("write_results").main
    argv = ["--readme", str(readme), "--docs", str(page), "--step-seconds", "0.16"]
    demo, compare = _demo_folder(tmp_path), _compare_folder(tmp_path)
    assert main([*argv, "--demo", str(demo), "--compare", str(compare)]) == 0
    text = readme.read_text(encoding="utf-8")
    assert "old numbers" not in text and "Prose above." in text and "Prose below." in text
    assert "| clean reference | 439.2 | 70.4 | 38.7 | - | 2.9 |" in text
    assert "| UGNCL 50% noise | 429.9 | 68.0 | 36.6 | 0.904 | 6.8 |" in text
    assert "UGNCL/clean 0.98" in text and "0.160 CPU s" in text and "at commit `" in text
    assert "| sgraf (SGR) | hinge |" in text and "`ugncl+pf`: +10.0 rSum" in text
    # the README takes the table, the claims (which orderings hold on every seed) and the
    # gain; the budget section stays in docs/comparison.md
    assert "a claim." in text and "a claim." in page.read_text(encoding="utf-8")
    assert "not copied" not in text
    assert main(["--check", "--readme", str(readme), "--docs", str(page)]) == 0
    capsys.readouterr()

    # a hand edit between the markers: --check names it, the next write replaces it
    readme.write_text(text.replace("429.9", "499.9"), encoding="utf-8")
    assert main(["--check", "--readme", str(readme), "--docs", str(page)]) == 1
    assert f"edited by hand: {readme}: demo" in capsys.readouterr().out
    assert main([*argv, "--demo", str(demo)]) == 0
    assert "overwritten" in capsys.readouterr().err
    assert readme.read_text(encoding="utf-8") == text


def test_a_second_comparison_goes_to_its_own_named_blocks(tool, tmp_path, docs) -> None:
    readme, page = docs
    second = "<!-- results:compare-clip:begin sha256= -->\n<!-- results:compare-clip:end -->\n"
    for path in (readme, page):
        path.write_text(path.read_text(encoding="utf-8") + second, encoding="utf-8")
    argv = ["--readme", str(readme), "--docs", str(page), "--step-seconds", "0.16"]
    main = tool("write_results").main
    assert (
        main([*argv, "--compare", str(_compare_folder(tmp_path)), "--block", "compare-clip"]) == 0
    )
    for path in (readme, page):
        text = path.read_text(encoding="utf-8")
        default, named = text.split("results:compare-clip:begin")
        assert "a claim." not in default and "a claim." in named  # the default block untouched
    # a cell that did not finish is said in the block, with its reason
    md = (tmp_path / "compare" / "compare.md").read_text(encoding="utf-8")
    refused = [f"- clip-npc-paper-n50-s{s}: failed (rc 2, see clip-npc-paper-n50-s{s}.log): "
               "error: no clean pair" for s in (0, 1)]  # fmt: skip
    kernels = "CPU kernels: AVX2, MKL_CBWR=AVX2, every run."
    md = md.replace("# Report\n", f"# Report\n\n{kernels}\n\nCells that did not finish:\n"
                    + "\n".join(refused) + "\n")  # fmt: skip
    # one line for the cells that stopped for one reason
    refusal = "- clip-npc-paper-n50-s0, clip-npc-paper-n50-s1: failed (rc 2): error: no clean pair"
    (tmp_path / "compare" / "compare.md").write_text(md, encoding="utf-8")
    assert main([*argv, "--compare", str(tmp_path / "compare"), "--block", "compare-clip"]) == 0
    named = readme.read_text(encoding="utf-8").split("results:compare-clip:begin")[1]
    assert f"Cells that did not finish:\n\n{refusal}\n\n**Mean over seeds**" in named
    assert f"finished runs.\n{kernels}\n" in named
    # a name without markers is one error line that names them
    assert main([*argv, "--compare", str(tmp_path / "compare"), "--block", "other"]) == 2


def test_missing_markers_and_records_are_one_error_line(tool, tmp_path, capsys) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n", encoding="utf-8")
    main = tool("write_results").main
    demo = _demo_folder(tmp_path)
    args = ["--readme", str(readme), "--step-seconds", "1"]
    assert main([*args, "--demo", str(demo)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "results:demo:begin" in line
    assert main([*args, "--compare", str(tmp_path / "none")]) == 2
    assert "compare.json not found" in capsys.readouterr().err
    with pytest.raises(BlockError):
        replace_block("text", "demo", "body")
    assert edited_blocks("no blocks") == []


def test_the_repository_blocks_are_as_written() -> None:
    """README.md and docs/comparison.md hold the blocks, none edited by hand."""
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text(encoding="utf-8")
    page = (root / "docs" / "comparison.md").read_text(encoding="utf-8")
    for text, names in ((readme, ("demo", "compare")), (page, ("compare",))):
        for name in names:
            assert f"<!-- results:{name}:begin sha256=" in text
        assert edited_blocks(text) == []


def test_demo_rows_are_data(tool) -> None:
    demo = tool("demo")
    paper = demo.ROWS["UGNCL paper"]
    assert paper.sets == ("method.ugncl.reading=paper",)
    assert ("UGNCL paper" in demo.RUNS) == ("method.ugncl.reading" in all_keys())
    assert demo.RUNS["UGNCL"] == ("ugncl_synthetic", True, "ugncl_synthetic")
    assert set(demo.SHORT_SCHEDULE) == set(demo.RUNS)
