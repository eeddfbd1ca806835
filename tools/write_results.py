"""Write the README's and docs' result blocks from run records, with the commit and this
machine's reference step time (``ugncl.run.results_block``).

    python tools/write_results.py --demo runs/demo-20261128-0300      # README demo block
    python tools/write_results.py --compare runs/compare              # README + comparison page
    python tools/write_results.py --compare runs/compare-clip-counting \
        --block compare-clip-counting                                 # a second world
    python tools/write_results.py --check                             # exit 1 on a hand edit

``make demo`` and ``make compare`` call it after their runs; ``--block`` writes a comparison
into another pair of blocks (a second world's report beside the default plan's). A block is
the text between ``<!-- results:NAME:begin sha256=... -->`` and ``<!-- results:NAME:end -->``;
the hash is of what the writer wrote, so ``--check`` names a block edited by hand, and the next
write replaces it (with a warning). The reference step time is measured by
``tools/bench.py method-steps --methods ugncl --steps 30 --threads 1`` unless
``--step-seconds`` gives it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from precomputed.errors import InvalidSettingError
from ugncl.run.cli import cli_main
from ugncl.run.results_block import BlockError, compare_body, demo_body, edited_blocks
from ugncl.run.results_block import replace_block as replace

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
COMPARISON = REPO / "docs" / "comparison.md"
#: Which report sections a comparison block holds in each file.
COMPARE_BLOCKS = {
    "README": ("Mean over seeds", "Regime", "Claims", "What drives the gain"),
    "COMPARISON": (
        "Mean over seeds",
        "Regime",
        "Budget and shared settings",
        "Claims",
        "What drives the gain",
    ),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--demo", type=Path, help="a tools/demo.py output folder")
    parser.add_argument("--compare", type=Path, help="a comparison folder (compare.json)")
    parser.add_argument(
        "--block",
        default="compare",
        help="with --compare: the name of the blocks to write in the README and the comparison "
        "page (default compare; both files must hold its markers)",
    )
    parser.add_argument("--check", action="store_true", help="report hand-edited blocks")
    parser.add_argument("--readme", type=Path, default=README, help="the README to write")
    parser.add_argument("--docs", type=Path, default=COMPARISON, help="the comparison page")
    parser.add_argument(
        "--step-seconds", type=float, default=None, help="the reference step time (not measured)"
    )
    args = parser.parse_args(argv)
    if not (args.demo or args.compare or args.check):
        parser.error("pass --demo FOLDER, --compare FOLDER or --check")
    if args.step_seconds is not None and not args.step_seconds > 0:
        parser.error(f"--step-seconds must be a positive number, got {args.step_seconds}")
    return args


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout


def commit() -> str:
    """The checkout's commit (short), ``-dirty`` with uncommitted changes; ``unknown``
    outside a git checkout."""
    try:
        head = _git("rev-parse", "--short=12", "HEAD").strip()
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty.strip() else "")


def measure_step() -> float | None:
    """This machine's reference step time (CPU s), or None where the bench fails."""
    cmd = [sys.executable, str(REPO / "tools" / "bench.py"), "method-steps", "--methods",
           "ugncl", "--steps", "30", "--threads", "1"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0 or "{" not in done.stdout:
        print(f"warning: the reference step was not measured ({done.stderr.strip()[-200:]})",
              file=sys.stderr)  # fmt: skip
        return None
    report = json.loads(done.stdout[done.stdout.index("{") :])
    return float(report["results"][0]["cpu_s_per_step"])


def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise InvalidSettingError(f"{path} not found: pass the folder {what} wrote")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise InvalidSettingError(f"{path} is not JSON ({err}); rerun {what}") from err


def write_block(path: Path, name: str, body: str) -> None:
    """Replace block ``name`` of ``path``, warning where it had been edited by hand."""
    if not path.is_file():
        raise InvalidSettingError(f"{path} not found: pass --readme/--docs of this checkout")
    text = path.read_text(encoding="utf-8")
    if name in edited_blocks(text):
        print(f"warning: {path}: block '{name}' was edited by hand; overwritten",
              file=sys.stderr)  # fmt: skip
    try:
        path.write_text(replace(text, name, body), encoding="utf-8")
    except BlockError as err:
        raise InvalidSettingError(f"{path}: {err}") from err
    print(f"wrote block '{name}' of {path}", file=sys.stderr)


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.check:
        edited = [f"{p}: {name}" for p in (args.readme, args.docs) if p.is_file()
                  for name in edited_blocks(p.read_text(encoding="utf-8"))]  # fmt: skip
        for line in edited:
            print(f"edited by hand: {line}")
        return 1 if edited else 0
    demo = args.demo and _read_json(args.demo / "demo_summary.json", "tools/demo.py")
    report = args.compare and _read_json(args.compare / "compare.json", "tools/compare.py")
    md = args.compare / "compare.md" if args.compare else None
    if md is not None and not md.is_file():
        raise InvalidSettingError(f"{md} not found: rerun tools/compare.py --report-only")
    step = args.step_seconds if args.step_seconds is not None else measure_step()
    rev = commit()
    if demo:
        write_block(args.readme, "demo", demo_body(demo, rev, step))
    if report:
        text = md.read_text(encoding="utf-8")
        for target, sections in COMPARE_BLOCKS.items():
            path = args.readme if target == "README" else args.docs
            write_block(path, args.block, compare_body(report, text, rev, step, sections=sections))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
