"""Fail on prose that speaks of how the project is developed, or cites files outside the repo.

The repository documents the software: its comments, docstrings, configs, tests and docs say
what the code does and why (paper equations, released code, measurements). Words about the
development process ("stop 31", "this session", "issue 8", "the issue's targets", agents) and
citations of files that are not in the repository mean nothing to a reader of a clone, so
``make lint`` refuses them. A public repository's issue (``NPC#18``) is a citation and passes.

Examples::

    python tools/lint_prose.py            # every tracked and untracked, not ignored, text file
    python tools/lint_prose.py README.md docs/design.md

Prints one ``path:line: text  [rule]`` per offence and exits 1 when there is any, else 0.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (name, pattern); case-insensitive, matched per line. Each is narrow enough that the ordinary
# words stay legal: pytest's scope="session", "a training session" in a caption fixture,
# DataLoader workers, "lead to", an issue of a public repository cited as owner/repo#N.
RULES: tuple[tuple[str, str], ...] = (
    ("work stop", r"\bstops? [0-9]+\b"),
    (
        "work session",
        r"\b(this|that|the|each|every|next|previous|earlier|later|last|a) sessions?\b",
    ),
    ("agent", r"\bagents?\b"),
    ("issue number", r"(?<![#/\w])issues? ?#?[0-9]+\b"),
    ("issue's", r"\bissue'?s'? (targets?|items?|list|check)\b|\bthe issue's\b"),
    ("the lead", r"\bthe lead\b(?! author)"),
    ("outside file", r"UGNCL_METHOD|reference_implementations|CONTRACT\.md|ARCHITECTURE\.md"),
    ("outside file", r"STYLE(\.md| pattern)|\.\./shared\b|\breference §"),
)
_COMPILED = tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in RULES)

# Files scanned: text a reader meets. Data fixtures (caption files, vocabularies) are corpora,
# not prose, and this linter and its test necessarily spell the patterns out.
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".txt", ".sh", ".rst"}
TEXT_NAMES = {"Makefile", "run", "Dockerfile"}
SKIP = {"tools/lint_prose.py", "tests/tools/test_lint_prose.py"}
SKIP_DIRS = ("tests/fixtures/", ".venv/", "runs/", "data/", ".git/")


def _is_text(rel: str) -> bool:
    path = Path(rel)
    return path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES


def repository_files(root: Path) -> list[str]:
    """Tracked and untracked-but-not-ignored files (git), else a walk of the tree."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode("utf-8", "replace")
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") or d == ".ci"]
            for f in filenames:
                names.append(str(Path(dirpath, f).relative_to(root)))
    return sorted(n for n in names if (root / n).is_file())


def offences(text: str) -> list[tuple[int, str, str]]:
    """(line number, line, rule name) of every offending line of ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for name, pattern in _COMPILED:
            if pattern.search(line):
                found.append((number, line.strip(), name))
                break
    return found


def lint(paths: list[str], root: Path = ROOT) -> list[str]:
    """Offence lines ``path:line: text  [rule]`` for the given repository-relative paths."""
    report = []
    for rel in paths:
        rel = rel.replace(os.sep, "/")
        if rel in SKIP or rel.startswith(SKIP_DIRS) or not _is_text(rel):
            continue
        try:
            text = (root / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for number, line, name in offences(text):
            report.append(f"{rel}:{number}: {line[:160]}  [{name}]")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("paths", nargs="*", help="files relative to the repository root (default all)")
    args = p.parse_args(argv)
    paths = args.paths or repository_files(ROOT)
    report = lint(paths)
    for line in report:
        print(line)
    if report:
        print(
            f"lint_prose: {len(report)} line(s) speak of the development process or cite files "
            "outside the repository; say what the code does and cite docs/ instead",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
