"""Methods side by side: one table of finished runs, or train a config x seed grid first.

Read finished runs (folders written by ``tools/train.py``)::

    python tools/compare.py runs/clip_synthetic-20261122-101500 runs/npc_synthetic-20261122-1030
    python tools/compare.py runs/compare/* --format csv

Train each config x seed into ``OUT/<config>-s<seed>`` (in this process, through the same
``ugncl.run.training.train`` as ``tools/train.py``; a finished run is reused, an unfinished
one
resumed), then print the table with one mean row per config and write it to
``OUT/compare.<md|csv|json>``::

    python tools/compare.py --cfg clip_synthetic npc_synthetic sdd_synthetic osa_synthetic \\
        --seeds 0 1 --out runs/compare --set data.train_images=400 train.epochs=2

A demo grid (``tools/demo.py`` names its runs by config; repeated names get their parent
folder, ``s0t1/ugncl_synthetic``)::

    python tools/compare.py runs/grid/*/ugncl_synthetic

Columns: run, method, backbone, SGRAF head (sgr/saf), dataset, noise ratio, seed, CPU threads,
test rSum, i2t/t2i R@1, the epoch of the tested weights, epochs and optimiser steps trained,
the last epoch's noise-detection F1, UGNCL's hard sets
(size and true-clean share) and weight AUC (blank where the method records none), training
wall time in seconds (from the records' timestamps), seconds per epoch, the process's CPU
seconds, the ratio of seconds per epoch to the backbone's plain baseline's (triplet on SGRAF,
clip on CLIP) among the rows (CPU seconds where every row of the backbone recorded them, else
wall seconds, which also count what else ran on the machine), and the noise file's
sha256 (short): rows of one noise ratio and seed trained on different files are refused (a
noise-file run is grouped by its measured noisy share, joined to a configured ratio within
0.03, so a file never escapes the check by its ratio).
Arguments that are files (``compare.md`` and the plots, caught by ``runs/compare/*``) are
skipped.

Over run folders, ``--out FOLDER`` also writes the report folder (tables, computed claims,
plots), and ``--skip-failed`` leaves out (with a warning) a folder that is not a finished run.

The embedded comparison (``make compare``): the controls and every registered method on both
backbones (docs/comparison.md), one optimiser-step budget per backbone, three seeds, each run a
``tools/train.py`` subprocess (``--jobs`` at a time; a rerun resumes where it stopped), then
the report folder (compare.md with the computed claims, compare.csv, compare.json,
rsum_vs_noise.png, detection.png, weights.png)::

    python tools/compare.py --plan default --jobs 2 --out runs/compare
    python tools/compare.py --plan quick --jobs 2          # runs/compare-quick: a first look
    python tools/compare.py --plan full --jobs 2 --out runs/compare-full
    python tools/compare.py --plan default --estimate 0.16  # the estimated wall time
    python tools/compare.py --plan default --world "--seed 7 --attribute-sharing 0.3"

``--world`` takes tools/make_synthetic.py's options; that world is written once to
``data/worlds/<hash of the options>`` (the default world: ``data/synthetic``) with its CLIP
stand-in weights (tools/pretrain_clip.py), and its report goes to
``runs/compare-<hash of the options>`` (a plan reuses finished cells by name, so each world has
its own folder). The counting world (``--world "--generator counting"``) has a CLIP view of
its own renderer; a world without rendered images (``--generator activity``) gets the SGRAF
track only. ``--backbone clip`` trains and reports one track, and ``--pool-shift renamed``
gives it a stand-in whose pretraining pool names one concept by another word, so that the
fine-tune has something to teach (``make compare-clip``'s worlds)::

    python tools/compare.py --plan default --world "--generator counting" --backbone clip \
        --pool-shift renamed
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from precomputed.errors import InvalidSettingError
from ugncl.core.engine.recorder import read_metrics, setup_logging
from ugncl.run.cli import check_writable, cli_main
from ugncl.run.compare import (
    FORMATS,
    CompareError,
    cpu_kernels_note,
    format_table,
    mean_row,
    prepare_rows,
    read_run,
    run_labels,
    train_or_resume,
)
from ugncl.run.compare_claims import load_query_hits
from ugncl.run.config import load_config
from ugncl.run.results_block import FAILED_CELLS

if TYPE_CHECKING:
    from ugncl.run.compare_grid import PlanSize

SUFFIX = {"markdown": "md", "csv": "csv", "json": "json"}
#: ugncl.backbones.clip.pretrain.SHIFTS (a test keeps them equal), not imported here: that
#: module loads open_clip, which a report-only run does not need.
SHIFT_CHOICES = ("none", "withheld", "renamed")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="*", metavar="RUN_DIR", help="finished run directories")
    parser.add_argument("--cfg", nargs="+", help="configs to train and compare (grid mode)")
    parser.add_argument(
        "--plan",
        choices=("quick", "default", "full"),
        default=None,
        help="the embedded comparison: the controls and every registered method on both "
        "backbones, as subprocesses, then the report folder (quick: 50%% noise, 1 seed, 300 "
        "train images, SGRAF 4 epochs, CLIP 1; default: 50%%, 3 seeds, 400 images, SGRAF 8 "
        "epochs, CLIP 2; full: 20/50/80%%, 3 seeds, 1000 images, SGRAF 20, CLIP 3, InfoNCE on "
        "SGRAF)",
    )
    parser.add_argument(
        "--estimate",
        type=float,
        default=None,
        metavar="STEP_SECONDS",
        help="with --plan: print the plan's estimated wall time for this reference step time "
        "(tools/bench.py method-steps --methods ugncl --steps 30 --threads 1) and exit",
    )
    parser.add_argument(
        "--write-results",
        action="store_true",
        help="with --plan: afterwards write the README's and docs/comparison.md's result "
        "blocks from the report (tools/write_results.py --compare OUT; what make compare does)",
    )
    parser.add_argument(
        "--block",
        default="compare",
        help="with --write-results: the name of the result blocks to write (default compare; "
        "make compare-clip writes compare-clip-counting and compare-clip-fuller)",
    )
    parser.add_argument(
        "--skip-failed",
        action="store_true",
        help="over run folders: leave out (with a warning) a folder that is not a finished "
        "run, instead of stopping at it",
    )
    parser.add_argument(
        "--world",
        default="",
        metavar="OPTIONS",
        help="tools/make_synthetic.py options of the plan's world (default: the default world)",
    )
    parser.add_argument(
        "--pool-shift",
        choices=SHIFT_CHOICES,
        default=None,
        help="the CLIP stand-in's pool shift (ugncl/backbones/clip/pretrain.py; default: "
        "its POOL_SHIFT); a shifted stand-in has its own weights file",
    )
    parser.add_argument(
        "--backbone",
        choices=("sgraf", "clip"),
        default=None,
        help="with --plan: that backbone's rows only (default: both)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="plan cells trained at once")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="with --plan: train nothing, report the cells already finished",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=None,
        help="seeds (grid default 0; --plan: the plan's, 0 1 or 0 1 2 with full)",
    )
    parser.add_argument(
        "--ratios",
        nargs="+",
        type=float,
        default=None,
        metavar="RATIO",
        help="with --plan: these noise ratios instead of the plan's (e.g. --ratios 0.2; the "
        "clean rows train once at 0%%); the default folder is then runs/compare-n20...",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="grid or plan folder (default runs/compare); over run folders: write the report "
        "(compare.md/.csv/.json and the plots) there",
    )
    parser.add_argument(
        "--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
        help="overrides for every grid run, e.g. --set data.train_images=400 train.epochs=2 "
        "(with --plan: appended to every cell's, for smoke runs; the report says so)",
    )  # fmt: skip
    parser.add_argument("--format", choices=FORMATS, default="markdown", help="table format")
    args = parser.parse_args(argv)
    if args.seeds is None and not args.plan:
        args.seeds = [0]
    if (bool(args.runs) + bool(args.cfg) + bool(args.plan)) != 1:
        parser.error("pass run directories to read, --cfg CONFIG [...] to train a grid, or --plan")
    if args.estimate is not None and (not args.plan or not args.estimate > 0):
        parser.error("--estimate STEP_SECONDS needs --plan and a positive number of seconds")
    if args.ratios is not None and not args.plan:
        parser.error("--ratios needs --plan (a grid's ratio is a --set data.noise_ratio)")
    if args.ratios is not None and not all(0.0 < r < 1.0 for r in args.ratios):
        parser.error(f"--ratios {args.ratios}: each noise ratio must lie strictly between 0 and 1")
    if args.block != "compare" and not args.write_results:
        parser.error(f"--block {args.block} names the result blocks --write-results writes: "
                     "add --write-results")  # fmt: skip
    if args.out is None and not args.runs:
        args.out = "runs/compare"
    return args


def run_grid(args: argparse.Namespace) -> list[dict]:
    """Train (or reuse) every config x seed; rows per config, then its mean row."""
    if len(set(args.seeds)) != len(args.seeds) or len(set(args.cfg)) != len(args.cfg):
        raise InvalidSettingError(f"--cfg {args.cfg} and --seeds {args.seeds} must not repeat")
    for config_name in args.cfg:  # every config and key checked before the first run trains
        load_config(config_name, args.set)
    check_writable(Path(args.out) / f"compare.{SUFFIX[args.format]}", "--out table")
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


def world_root(options: str) -> Path:
    """Where the world of ``options`` (tools/make_synthetic.py's) lives: ``data/synthetic``
    for none, else ``data/worlds/<sha256 of the options, 10 characters>``."""
    if not options.strip():
        return Path("data/synthetic")
    return (
        Path("data/worlds")
        / hashlib.sha256(" ".join(shlex.split(options)).encode()).hexdigest()[:10]
    )


def ensure_world(options: str, shift: str | None = None) -> tuple[Path, Path | None]:
    """The plan's world root and CLIP stand-in weights (of pool ``shift``), generated when
    missing; no weights (None) for a world without a CLIP view (``--generator activity`` or
    ``--image-size 0`` render no images)."""
    root = world_root(options)
    tools = Path(__file__).resolve().parent
    if not (root / "synthetic_precomp" / "world.json").is_file():
        print(f"writing the world {root} ({options or 'defaults'}) ...", file=sys.stderr)
        cmd = [sys.executable, str(tools / "make_synthetic.py"), "--out", str(root)]
        subprocess.run([*cmd, *shlex.split(options)], check=True)
    if not (root / "synthetic_clip").is_dir():
        print(f"{root} has no CLIP view (no rendered images): the SGRAF track only",
              file=sys.stderr)  # fmt: skip
        return root, None
    weights = stand_in_path(root, shift)
    pretrain = [sys.executable, str(tools / "pretrain_clip.py"), "--data", str(root)]
    if weights.is_file():
        return root, weights
    if shift == "renamed":  # made exactly from the unshifted stand-in, in seconds
        base = stand_in_path(root, "none")
        if not base.is_file():
            print(f"pretraining the CLIP stand-in {base} ...", file=sys.stderr)
            subprocess.run([*pretrain, "--out", str(base), "--threads", "1"], check=True)
        print(f"renaming the CLIP stand-in {base} into {weights} ...", file=sys.stderr)
        cmd = [*pretrain, "--shift", "renamed", "--from", str(base), "--out", str(weights)]
        subprocess.run([*cmd, "--threads", "1"], check=True)
    else:
        print(f"pretraining the CLIP stand-in {weights} ...", file=sys.stderr)
        shifted = ["--shift", shift] if shift else []
        subprocess.run([*pretrain, *shifted, "--out", str(weights), "--threads", "1"], check=True)
    return root, weights


def stand_in_path(root: Path, shift: str | None = None) -> Path:
    """The world's CLIP stand-in, named by its pretraining recipe (tools/pretrain_clip.py's
    defaults, and the pool shift where it is not ``none``), so a plan whose recipe changed
    pretrains a new one and its CLIP cells, which name the weights file, are stale and train
    again."""
    from ugncl.backbones.clip.models import TINY_MODEL
    from ugncl.backbones.clip.pretrain import POOL_SHIFT, POOL_SIZE, PretrainConfig

    steps = PretrainConfig().steps
    shift = shift or POOL_SHIFT
    tag = "" if shift == "none" else f"-{shift}"
    return root / "clip" / f"{TINY_MODEL}-{steps}steps-pool{POOL_SIZE}{tag}.pt"


def stand_in_record(weights: Path | None) -> tuple[str, dict] | None:
    """The stand-in's path and its pretraining record (the ``.json`` tools/pretrain_clip.py
    writes beside the weights: steps, seconds, zero-shot test metrics); None without one."""
    record = weights.with_suffix(".json") if weights is not None else None
    if record is None or not record.is_file():
        return None
    return str(weights), json.loads(record.read_text(encoding="utf-8"))


def plan_size(args: argparse.Namespace) -> PlanSize:
    """The plan's :class:`PlanSize` with ``--seeds`` and ``--ratios`` applied."""
    from ugncl.run.compare_grid import PLANS

    size = PLANS[args.plan]
    if args.seeds:
        size = dataclasses.replace(size, seeds=tuple(args.seeds))
    if args.ratios:
        size = dataclasses.replace(size, ratios=tuple(args.ratios))
    return size


def track_cells(cells: list, args: argparse.Namespace) -> list:
    """The plan's cells of ``--backbone``'s track (all without it): e.g. the CLIP rows on a
    second CLIP world."""
    if not args.backbone:
        return cells
    return [c for c in cells if c.backbone == args.backbone]


def print_estimate(args: argparse.Namespace) -> int:
    """The plan's estimated wall time (:func:`ugncl.run.compare_grid.estimate_seconds`) for
    the reference step time ``--estimate``, with the CLIP track as if the world had it."""
    from ugncl.run.compare_grid import default_plan, estimate_seconds

    cells = track_cells(default_plan(world_root(args.world), "clip.pt", plan_size(args)), args)
    seconds = estimate_seconds(cells, args.estimate, args.jobs)
    print(f"plan {args.plan}: {len(cells)} cells, about {seconds / 60:.0f} min with "
          f"--jobs {args.jobs} at a reference step of {args.estimate} s (the world and the CLIP "
          "stand-in, written once before the first plan, not included)")  # fmt: skip
    return 0


def run_plan_and_report(args: argparse.Namespace) -> int:
    from ugncl.run.compare_grid import (
        PLANS,
        cell_state,
        default_plan,
        last_error_line,
        plan_rows,
        ratio_tag,
        run_plan,
    )
    from ugncl.run.compare_report import write_report

    if args.estimate is not None:
        return print_estimate(args)
    if args.report_only:  # nothing to train: no world is written
        world = world_root(args.world)
        clip_view = (world / "synthetic_clip").is_dir()
        weights = stand_in_path(world, args.pool_shift) if clip_view else None
    else:
        world, weights = ensure_world(args.world, args.pool_shift)
    size = plan_size(args)
    if args.out == "runs/compare":  # one folder per plan and world: cells are reused by name
        args.out += "" if args.plan == "default" else f"-{args.plan}"
        args.out += f"-{world.name}" if args.world else ""
        if size.ratios != PLANS[args.plan].ratios:  # the plan's own report stays as it is
            args.out += "-" + "-".join(ratio_tag(r) for r in size.ratios)
    cells = track_cells(default_plan(world, weights, size), args)
    if args.set:  # e.g. a smoke run: fewer images and epochs in every cell
        cells = [dataclasses.replace(c, overrides=(*c.overrides, *args.set)) for c in cells]
    if args.report_only:
        words = {"done": "done", "stale": "stale (trained with another config; not reported)"}
        status = {c.name: words.get(cell_state(Path(args.out), c), "not run") for c in cells}
        for name, what in status.items():  # a cell that ran and stopped: its reason
            why = last_error_line(Path(args.out) / f"{name}.log") if what == "not run" else None
            status[name] = f"failed: {why}" if why else what
        if "done" not in status.values():
            raise CompareError(
                f"no cell of the {args.plan} plan has finished in {args.out}: run "
                f"`python tools/compare.py --plan {args.plan}` (without --report-only) first"
            )
    else:
        status = run_plan(cells, args.out, jobs=args.jobs, log=lambda m: print(m, file=sys.stderr))
    rows = plan_rows(cells, args.out)
    records = {r["run"]: read_metrics(Path(args.out) / r["run"]) for r in rows}
    hits = {r["run"]: load_query_hits(Path(args.out) / r["run"]) for r in rows}
    failed = [f"- {name}: {what}" for name, what in status.items() if what != "done"]
    notes = [
        f"`python tools/compare.py --plan {args.plan} --jobs {args.jobs}"
        + (f" --ratios {' '.join(str(r) for r in args.ratios)}" if args.ratios else "")
        + (f' --world "{args.world}"' if args.world else "")
        + (f" --backbone {args.backbone}" if args.backbone else "")
        + (f" --pool-shift {args.pool_shift}" if args.pool_shift else "")
        + "`",
        cpu_kernels_note(rows),
        f"World `{world}`, "
        + (f"CLIP stand-in `{weights}`" if weights else "no CLIP view (SGRAF track only, no OSA)")
        + f"; {len(cells)} cells, {len(rows)} rows.",
        *(
            [f"Every cell overridden with `{' '.join(args.set)}` (not the plan's sizes)."]
            if args.set
            else []
        ),
        *(["", FAILED_CELLS, *failed] if failed else []),
    ]
    tracks = {"sgraf": "SGRAF", "clip": "CLIP"}
    title = "Noisy-correspondence methods on " + (
        tracks[args.backbone] if args.backbone else "both backbones" if weights else "SGRAF"
    )
    paths = write_report(args.out, rows, records, title=title, notes=notes, hits=hits,
                         stand_in=stand_in_record(weights))  # fmt: skip
    print((Path(args.out) / "compare.md").read_text(encoding="utf-8"))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    if args.write_results:
        writer = Path(__file__).resolve().parent / "write_results.py"
        command = [sys.executable, str(writer), "--compare", str(args.out), "--block", args.block]
        rc = subprocess.run(command).returncode
        if rc:
            return rc
    return 1 if failed else 0


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plan:
        return run_plan_and_report(args)
    if args.cfg:
        rows = run_grid(args)
    else:
        # A glob such as runs/compare/* also catches the report's own files: skip files.
        dirs = [p for p in args.runs if not Path(p).is_file()]
        files = sorted(set(args.runs) - set(dirs))
        if not dirs:
            raise InvalidSettingError(
                f"no run directories among the arguments ({len(files)} file(s), e.g. "
                f"{files[0] if files else '-'}); give run folders such as runs/compare/*-s0"
            )
        for path in files:
            print(f"skipping {path}: a file, not a run directory", file=sys.stderr)
        rows = read_runs(dirs, skip_failed=args.skip_failed)
        if args.out is not None:
            return write_folder_report(args, rows)
    prepare_rows(rows)
    table = format_table(rows, args.format)
    if args.cfg:
        out = Path(args.out) / f"compare.{SUFFIX[args.format]}"
        out.write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0


def read_runs(dirs: list[str], *, skip_failed: bool) -> list[dict]:
    """The rows of ``dirs``; with ``skip_failed`` a folder that is not a finished run is left
    out with a warning naming it (else its error stops the table)."""
    rows = []
    for path, label in zip(dirs, run_labels(dirs)):
        try:
            row = read_run(path, label)
        except CompareError as err:
            if not skip_failed:
                raise CompareError(f"{err} (or pass --skip-failed to leave it out)") from err
            print(f"warning: skipping {path}: {err}", file=sys.stderr)
            continue
        row["run_dir"] = str(path)
        rows.append(row)
    if not rows:
        raise CompareError("no finished run among the folders given (every one was skipped)")
    return rows


def write_folder_report(args: argparse.Namespace, rows: list[dict]) -> int:
    """Run folders with ``--out``: the report folder (tables, claims, plots) and the table."""
    from ugncl.run.compare_report import write_report

    out = Path(args.out)
    check_writable(out / "compare.md", "--out report")
    records = {r["run"]: read_metrics(Path(r["run_dir"])) for r in rows}
    hits = {r["run"]: load_query_hits(r["run_dir"]) for r in rows}
    notes = [f"{len(rows)} run folders: " + ", ".join(f"`{r['run']}`" for r in rows) + ".",
             cpu_kernels_note(rows)]  # fmt: skip
    paths = write_report(out, rows, records, title="Comparison of run folders", notes=notes,
                         hits=hits)  # fmt: skip
    print(format_table(rows, args.format))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
