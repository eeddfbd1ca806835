"""tools/lint_prose.py: process words and outside citations fail, ordinary words pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools import lint_prose

ROOT = Path(__file__).resolve().parents[2]

FLAGGED = [
    "# Status (stop 32): meets the targets",
    "Decision (issue 8): the former cap",
    '"""Issue 8 item 3 (mechanism): at a random start"""',
    "The issue's check: an SGRAF run",
    "measured in this session on two cores",
    "the agents merge their branches",
    "the lead swaps the import at merge",
    "(UGNCL_METHOD.md section 10)",
    "(reference_implementations.md sections 1.1, 2.2)",
    "the names of CONTRACT.md",
    "``../shared/docs/UGNCL_METHOD.md`` fixes the reading",
    "COCO's train file is about 33 GB (reference §7.4)",
]

PASSING = [
    '@pytest.fixture(scope="session")',
    "rugby player in action during a training session",
    "A tiny synthetic world written once per test session.",
    "the reading of NPC#18 and open_clip's issue tracker (mlfoundations/open_clip#123)",
    "images are decoded in data.num_workers DataLoader workers",
    "a leading space; this can lead to a tie; the issue is a tie",
    "the run stops after 3 epochs without improvement",
]


@pytest.mark.parametrize("line", FLAGGED)
def test_process_words_and_outside_citations_are_flagged(line):
    assert lint_prose.offences(line), line


@pytest.mark.parametrize("line", PASSING)
def test_ordinary_words_pass(line):
    assert lint_prose.offences(line) == [], line


def test_main_reports_path_line_and_exit_1(tmp_path, capsys):
    (tmp_path / "bad.py").write_text('"""ok"""\n# see stop 12\n', encoding="utf-8")
    (tmp_path / "data.tsv").write_text("stop 12\n", encoding="utf-8")  # not prose: skipped
    report = lint_prose.lint(["bad.py", "data.tsv"], root=tmp_path)
    assert report == ["bad.py:2: # see stop 12  [work stop]"]


def test_the_repository_is_clean():
    """`make lint` runs this script; the tree it lints must pass (else CI fails)."""
    proc = subprocess.run(
        [sys.executable, "tools/lint_prose.py"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
