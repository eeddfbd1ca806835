"""The demo (``make demo``): what noisy correspondence costs on the synthetic world, what UGNCL
wins back, and how its package reading compares with the paper as printed.

Generates the synthetic world if it is missing, then trains runs of the same CPU-sized SGRAF on
the same training images and evaluates each run's best checkpoint on the test split:

* ``clean reference`` (``clean_synthetic``): the hinge over all negatives trained without noise;
* ``hinge 50%`` (``clean_synthetic`` at the noise ratio): the same hinge and schedule, no noise
  handling -- on some worlds a strong baseline;
* ``UGNCL 50%`` (``ugncl_synthetic``): UGNCL's package reading at the noise ratio;
* ``UGNCL paper 50%`` (``ugncl_synthetic`` with ``method.ugncl.reading=paper``): the paper as
  printed, same schedule;
* ``triplet 50%`` (``triplet_synthetic``, only with ``--only ... triplet``): the
  hardest-negative baseline, which collapses under noise on this world;

and adds the exact-scene oracle ceiling of the test split (``tools/oracle.py``). Prints one
table, which noisy baseline is the stronger, the ratios of UGNCL to the clean reference and
to the stronger noisy baseline, and writes it as JSON to ``<out>/demo_summary.json``.

Examples::

    python tools/demo.py                                  # the table of the README
    python tools/demo.py --seed 1 --threads 1 --out runs/demo-s1t1
    python tools/demo.py --world-root data/variant --world seed=7 region_noise=0.8
"""

from __future__ import annotations

import argparse
import inspect
import json
import multiprocessing
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import NamedTuple

from precomputed.captions import read_captions_txt
from precomputed.errors import UserError
from precomputed.noise import clean_image_index
from precomputed.synthetic import DATASET_NAME, make_synthetic
from precomputed.synthetic.oracle import oracle_scores
from precomputed.synthetic.world import read_scenes
from ugncl.core.engine.recorder import read_metrics
from ugncl.core.metrics import retrieval_metrics
from ugncl.run.cli import check_writable, cli_main
from ugncl.run.config import all_keys, load_config
from ugncl.run.training import train, train_log_only

__all__ = ["ROWS", "RUNS", "DemoRow", "main"]


class DemoRow(NamedTuple):
    """One row of the demo's table.

    Attributes:
        config: the config it trains.
        noisy: trained at the demo's noise ratio (else without noise).
        folder: its run folder's name.
        short: the ``--schedule short`` overrides.
        sets: overrides that make the row what it is (e.g. a reading).
        needs: a config key the row needs; a build without it leaves the row out.
        default: trained by a plain run (else only when ``--only`` names it).
    """

    config: str
    noisy: bool
    folder: str
    short: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()
    needs: str | None = None
    default: bool = True


#: The demo's schedule (``--schedule short``, the default): the configs' own 20 epochs cut so
#: that ``make demo`` fits 10 minutes on the slower 2-core machines of its kind (5.8 min
#: measured at a reference step of 0.146 CPU s, so up to about 0.25 s): the clean reference
#: and the hinge train 4 all-negatives + 1 hardest-negative epochs (configs: 19 + 1), both
#: UGNCL readings 2 warm-up + 5 main epochs with the lr step at the last (configs: 2 + 18).
#: The short schedule lowers every trained row (UGNCL's package reading most: it is still
#: climbing at 2 + 5); ``--schedule config`` trains the configs as written
#: (docs/research/ugncl-generalisation.md).
_HINGE_SHORT = ("train.warmup_epochs=4", "train.epochs=1")
_UGNCL_SHORT = ("train.epochs=5", "train.lr_update=4")
#: Table rows in table order. UGNCL's paper reading joins beside its package reading where
#: this build has the reading switch (``method.ugncl.reading``). The triplet row trains only
#: when asked for (``--only``): it collapses under noise on this world and costs a minute.
ROWS: dict[str, DemoRow] = {
    "clean reference": DemoRow("clean_synthetic", False, "clean_synthetic", _HINGE_SHORT),
    "hinge": DemoRow("clean_synthetic", True, "hinge_synthetic", _HINGE_SHORT),
    "triplet": DemoRow("triplet_synthetic", True, "triplet_synthetic", default=False),
    "UGNCL": DemoRow("ugncl_synthetic", True, "ugncl_synthetic", _UGNCL_SHORT),
    "UGNCL paper": DemoRow(
        "ugncl_synthetic",
        True,
        "ugncl_paper_synthetic",
        _UGNCL_SHORT,
        ("method.ugncl.reading=paper",),
        "method.ugncl.reading",
    ),
}
#: Row -> (config, noisy?, run folder name), the rows this build runs.
RUNS = {
    name: (row.config, row.noisy, row.folder)
    for name, row in ROWS.items()
    if row.needs is None or row.needs in all_keys()
}
SHORT_SCHEDULE = {name: ROWS[name].short for name in RUNS}
#: The rows a plain ``python tools/demo.py`` trains.
DEFAULT_ROWS = [name for name in RUNS if ROWS[name].default]
_RUN_KEYS = {
    name.lower().replace(" reference", "").replace(" ", "_"): name for name in RUNS
}  # clean, hinge, triplet, ugncl, ugncl_paper
#: The noisy baselines (no noise handling), for "the stronger noisy baseline".
_BASELINES = ("hinge", "triplet")
# make_synthetic's keyword arguments (the world knobs) and their types, for --world.
_WORLD_PARAMS = {
    name: p.default
    for name, p in inspect.signature(make_synthetic).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=(
            "Train the clean reference, the hinge and UGNCL (package and paper readings) on the "
            "synthetic world and print one table with the oracle ceiling of its test split."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--world-root", "--data-root", dest="world_root", default="data/synthetic",
        help="world root (holds synthetic_precomp/); generated there if missing",
    )  # fmt: skip
    parser.add_argument(
        "--world", nargs="+", action="extend", default=[], metavar="KNOB=VALUE",
        help="settings of make_synthetic used when the world is generated, e.g. seed=7 "
        "region_noise=0.8 (see tools/make_synthetic.py --help; '-' becomes '_'); an existing "
        "world must match them",
    )  # fmt: skip
    parser.add_argument("--noise-ratio", type=float, default=0.5, help="caption noise ratio")
    parser.add_argument("--seed", type=int, default=None, help="train.seed of every run")
    parser.add_argument(
        "--threads", type=int, default=None,
        help="train.threads of every run (default: torch's; with --jobs N > 1: cores / N)",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=1,
        help="train this many rows at once in worker processes (longest row first); a row's "
        "result depends on its seed and thread count, not on --jobs",
    )  # fmt: skip
    parser.add_argument(
        "--only", nargs="+", choices=sorted(_RUN_KEYS), default=None,
        help="train only these rows (the oracle row is always computed); triplet trains only "
        "when named here",
    )  # fmt: skip
    parser.add_argument(
        "--schedule", choices=("short", "config"), default="short",
        help="short: the demo's cut schedule (clean/hinge 10 epochs, UGNCL 14) | config: the "
        "configs' own (20 epochs each)",
    )  # fmt: skip
    parser.add_argument("--out", default=None, help="runs folder (default runs/demo-<time>)")
    parser.add_argument(
        "--write-results", action="store_true",
        help="afterwards write the README's demo block from this run's records "
        "(tools/write_results.py --demo OUT; what make demo does)",
    )  # fmt: skip
    parser.add_argument(
        "--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
        help="extra overrides applied to every run's config (e.g. train.epochs=2)",
    )  # fmt: skip
    return parser


def world_settings(pairs: list[str]) -> dict:
    """``["seed=7", "region-noise=0.8"]`` -> make_synthetic keyword arguments (typed)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in _WORLD_PARAMS:
            raise ValueError(
                f"--world {pair!r}: expected KNOB=VALUE with KNOB one of "
                f"{', '.join(sorted(_WORLD_PARAMS))}"
            )
        default = _WORLD_PARAMS[key]
        try:
            if isinstance(default, tuple):
                out[key] = tuple(type(default[0])(v) for v in value.split(",") if v)
            else:
                out[key] = type(default)(value)
        except ValueError:
            kind = type(default).__name__
            raise ValueError(f"--world {pair!r}: {value!r} is not of type {kind}") from None
    return out


def ensure_world(root: Path, settings: dict) -> None:
    """Generate the world at ``root`` if missing; refuse an existing one of other settings."""
    world_json = root / DATASET_NAME / "world.json"
    if world_json.is_file():
        existing = json.loads(world_json.read_text())
        existing.setdefault("generator", "default")  # written by the default generator
        # Every scalar knob, defaults included: a world left over from older defaults is
        # refused, not silently trained on.
        wanted = {
            k: v for k, v in {**_WORLD_PARAMS, **settings}.items() if not isinstance(v, tuple)
        }
        if existing["generator"] != "default":  # the default generator's knobs do not apply
            wanted = {k: v for k, v in wanted.items() if k in existing or k in settings}
        differ = {k: (existing.get(k), v) for k, v in wanted.items() if existing.get(k) != v}
        if "nuisance_redraw" in existing:  # a probe copy (make_synthetic --redraw-nuisance)
            differ["nuisance_redraw"] = (existing["nuisance_redraw"], None)
        if differ:
            raise ValueError(
                f"{root} holds a world with other settings {differ} (existing, requested); "
                "pass another --world-root or delete it"
            )
        return
    print(f"generating the synthetic world in {root} ...", flush=True)
    started = time.perf_counter()
    make_synthetic(root, **settings)
    print(f"  done in {time.perf_counter() - started:.1f}s", flush=True)


def oracle_row(root: Path) -> dict:
    """The exact-scene oracle on the test split (the split every run is tested on)."""
    started = time.perf_counter()
    folder = root / DATASET_NAME
    scenes = read_scenes(folder / "test_scenes.jsonl")
    captions = read_captions_txt(folder / "test_caps.txt")
    metrics = retrieval_metrics(
        oracle_scores(scenes, captions),
        clean_image_index(len(scenes), len(captions) // len(scenes)),
    )
    return _row("oracle ceiling", metrics, None, time.perf_counter() - started, None)


def _row(name: str, test: dict, division: dict | None, seconds: float, run_dir) -> dict:
    return {
        "method": name,
        "noisy": RUNS[name][1] if name in RUNS else False,
        "rsum": test["rsum"],
        "i2t/R@1": test["i2t/R@1"],
        "t2i/R@1": test["t2i/R@1"],
        "noisy_f1": None if division is None else division.get("noisy_f1"),
        "minutes": seconds / 60,
        "run_dir": None if run_dir is None else str(run_dir),
        "division": division,
    }


def last_division(run_dir: Path) -> dict | None:
    records = [r for r in read_metrics(run_dir) if r["event"] == "division"]
    return records[-1] if records else None


def format_table(rows: list[dict], noise_ratio: float) -> str:
    header = f"{'run':<22}{'rSum':>8}{'i2t R@1':>9}{'t2i R@1':>9}{'noise F1':>10}{'min':>6}"
    lines = [header, "-" * len(header)]
    for row in rows:
        f1 = "-" if row["noisy_f1"] is None else f"{row['noisy_f1']:.3f}"
        name = row["method"]
        if row.get("noisy"):
            name = f"{name} {noise_ratio:.0%} noise"
        lines.append(
            f"{name:<22}{row['rsum']:>8.1f}{row['i2t/R@1']:>9.1f}"
            f"{row['t2i/R@1']:>9.1f}{f1:>10}{row['minutes']:>6.1f}"
        )
    return "\n".join(lines)


def ratios(rows: list[dict]) -> dict[str, float]:
    """The demo's targets as ratios of test rSum (only those whose rows were run)."""
    r = {row["method"]: row["rsum"] for row in rows}
    out = {}
    pairs = (
        ("clean/oracle", "clean reference", "oracle ceiling"),
        ("UGNCL/clean", "UGNCL", "clean reference"),
        ("UGNCL paper/clean", "UGNCL paper", "clean reference"),
        ("UGNCL/hinge", "UGNCL", "hinge"),
        ("UGNCL/triplet", "UGNCL", "triplet"),
    )
    for key, a, b in pairs:
        if a in r and b in r and r[b] > 0:
            out[key] = r[a] / r[b]
    best = stronger_baseline(rows)
    if best is not None and "UGNCL" in r and r[best] > 0:
        out["UGNCL/stronger noisy baseline"] = r["UGNCL"] / r[best]
    return out


def stronger_baseline(rows: list[dict]) -> str | None:
    """The noisy baseline (``hinge`` or ``triplet``) with the higher test rSum, of those run."""
    r = {row["method"]: row["rsum"] for row in rows if row["method"] in _BASELINES}
    return max(r, key=r.get) if r else None


def train_rows(configs: dict, jobs: int) -> dict[str, tuple[dict, Path, float]]:
    """Train every row; ``{name: (test record, run dir, seconds)}`` in table order.

    ``jobs > 1`` trains rows in that many spawned worker processes, the longest (UGNCL)
    submitted first so that the others fit beside it.
    """
    if jobs <= 1:
        out = {}
        for name, (cfg, config) in configs.items():
            print(f"training {name} ({cfg}) ...", flush=True)
            started = time.perf_counter()
            result = train(config, config_name=cfg)
            out[name] = (result.test, result.run_dir, time.perf_counter() - started)
        return out
    order = sorted(configs, key=lambda name: not name.startswith("UGNCL"))
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {}
        for name in order:
            cfg, config = configs[name]
            print(f"training {name} ({cfg}) in a worker; log: its train.log", flush=True)
            futures[name] = pool.submit(train_log_only, config, config_name=cfg)
        done = {}
        for name in order:
            result, seconds = futures[name].result()
            done[name] = (result.test, result.run_dir, seconds)
            print(f"  {name} done in {done[name][2] / 60:.1f} min", flush=True)
    return {name: done[name] for name in configs}


def cpu_capability() -> str:
    """The vectorised kernels torch dispatches to (``AVX2``, ``AVX512``, ``DEFAULT``)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started_all = time.perf_counter()
    root = Path(args.world_root)
    out = Path(args.out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        if not 0.0 <= args.noise_ratio < 1.0:
            raise ValueError(f"--noise-ratio must be in [0, 1), got {args.noise_ratio}")
        if out.exists() and any(out.iterdir()):
            raise ValueError(f"{out} already holds runs; pass another --out")
        check_writable(out / ".probe", "runs folder")
        ensure_world(root, world_settings(args.world))
        common = [f"data.root={root}", f"run.out_dir={out}"]
        if args.seed is not None:
            common.append(f"train.seed={args.seed}")
        if args.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
        threads = args.threads
        if threads is None and args.jobs > 1:
            threads = max(1, (os.cpu_count() or 1) // args.jobs)
        if threads is not None:
            common.append(f"train.threads={threads}")
        wanted = [_RUN_KEYS[k] for k in args.only] if args.only else DEFAULT_ROWS
        configs = {}
        for name in wanted:
            cfg, noisy, folder = RUNS[name]
            noise = [f"data.noise_ratio={args.noise_ratio}"] if noisy else []
            schedule = SHORT_SCHEDULE[name] if args.schedule == "short" else ()
            overrides = [*common, *noise, *ROWS[name].sets, *schedule, f"run.name={folder}",
                         *args.set]  # fmt: skip
            configs[name] = (cfg, load_config(cfg, overrides)[0])  # validate all before training
    except ValueError as err:  # argument values; ConfigError and data errors reach cli_main
        if isinstance(err, UserError):
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    results = train_rows(configs, args.jobs)
    rows = [
        _row(name, test, last_division(run_dir), seconds, run_dir)
        for name, (test, run_dir, seconds) in results.items()
    ]
    world = json.loads((root / DATASET_NAME / "world.json").read_text())
    if world.get("generator", "default") == "default":  # the oracle reads default scenes
        rows.append(oracle_row(root))
    table = format_table(rows, args.noise_ratio)
    targets = ratios(rows)
    total = (time.perf_counter() - started_all) / 60
    print(f"\nsynthetic world {root}, test split ({args.schedule} schedule):\n{table}")
    best = stronger_baseline(rows)
    if best is not None:
        name = {"hinge": "the hinge over all negatives", "triplet": "the hardest-negative triplet"}
        print(f"stronger noisy baseline: {name[best]} ({best} row)")
    print("test rSum ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in targets.items()))
    print(f"total {total:.1f} min")
    summary = {
        "world_root": str(root),
        "world": world,
        "noise_ratio": args.noise_ratio,
        "seed": args.seed,
        "threads": threads,
        "jobs": args.jobs,
        # The kernels that ran (docs/reproducibility.md: they decide the numbers too).
        "cpu_capability": cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR"),
        "schedule": args.schedule,
        "rows": rows,
        "ratios": targets,
        "stronger_noisy_baseline": best,
        "total_minutes": total,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo_summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print(f"summary written to {out / 'demo_summary.json'}")
    if args.write_results:
        writer = Path(__file__).resolve().parent / "write_results.py"
        return subprocess.run([sys.executable, str(writer), "--demo", str(out)]).returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
