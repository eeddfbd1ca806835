"""Methods side by side: one table of finished runs, or train a config x seed grid first.

Read finished runs (folders written by ``tools/train.py``)::

    python tools/compare.py runs/clip_synthetic-20261122-101500 runs/npc_synthetic-20261122-1030
    python tools/compare.py runs/compare/* --format csv

Train each config x seed into ``OUT/<config>-s<seed>`` (in this process, through the same
``ugncl.framework.training.train`` as ``tools/train.py``; a finished run is reused, an unfinished
one
resumed), then print the table with one mean row per config and write it to
``OUT/compare.<md|csv|json>``::

    python tools/compare.py --cfg clip_synthetic npc_synthetic sdd_synthetic osa_synthetic \\
        --seeds 0 1 --out runs/compare --set data.train_images=400 train.epochs=2

A demo grid (``tools/demo.py`` names its runs by config; repeated names get their parent
folder, ``s0t1/ugncl_synthetic``)::

    python tools/compare.py runs/grid/*/ugncl_synthetic

Columns: run, method, backbone, dataset, noise ratio, seed, CPU threads, test rSum, i2t/t2i
R@1, the epoch of the tested weights, the last epoch's noise-detection F1, UGNCL's hard sets
(size and true-clean share) and weight AUC (blank where the method records none), training
wall time in seconds (from the records' timestamps).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from precomputed.errors import InvalidSettingError
from ugncl.framework.cli import cli_main
from ugncl.framework.compare import (
    FORMATS,
    format_table,
    mean_row,
    read_run,
    run_labels,
    train_or_resume,
)
from ugncl.framework.config import load_config
from ugncl.framework.engine.recorder import setup_logging

SUFFIX = {"markdown": "md", "csv": "csv", "json": "json"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="*", metavar="RUN_DIR", help="finished run directories")
    parser.add_argument("--cfg", nargs="+", help="configs to train and compare (grid mode)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="grid seeds (default 0)")
    parser.add_argument("--out", default="runs/compare", help="grid folder (default runs/compare)")
    parser.add_argument(
        "--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
        help="overrides for every grid run, e.g. --set data.train_images=400 train.epochs=2",
    )  # fmt: skip
    parser.add_argument("--format", choices=FORMATS, default="markdown", help="table format")
    args = parser.parse_args(argv)
    if bool(args.runs) == bool(args.cfg):
        parser.error("pass run directories to read, or --cfg CONFIG [...] to train a grid")
    return args


def run_grid(args: argparse.Namespace) -> list[dict]:
    """Train (or reuse) every config x seed; rows per config, then its mean row."""
    if len(set(args.seeds)) != len(args.seeds) or len(set(args.cfg)) != len(args.cfg):
        raise InvalidSettingError(f"--cfg {args.cfg} and --seeds {args.seeds} must not repeat")
    for config_name in args.cfg:  # every config and key checked before the first run trains
        load_config(config_name, args.set)
    # open_clip logs through the root logger; without a handler there, its first message
    # installs logging's default stderr handler and every run's log line is printed twice.
    setup_logging(None)
    rows = []
    for config_name in args.cfg:
        group = []
        for seed in args.seeds:
            run_dir, what = train_or_resume(config_name, seed, args.out, args.set)
            print(f"{what}: {run_dir}", file=sys.stderr)
            group.append(read_run(run_dir))
        rows += group
        if len(group) > 1:
            rows.append(mean_row(group, Path(config_name).stem))
    return rows


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cfg:
        rows = run_grid(args)
    else:
        rows = [read_run(path, label) for path, label in zip(args.runs, run_labels(args.runs))]
    table = format_table(rows, args.format)
    if args.cfg:
        out = Path(args.out) / f"compare.{SUFFIX[args.format]}"
        out.write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
