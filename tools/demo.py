"""The demo: UGNCL vs the triplet baseline on the synthetic world at 50% noise (``make demo``).

Generates the synthetic world if it is missing, trains both methods with the synthetic
configs, evaluates the best checkpoint of each on the test split and prints one table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from precomputed.synthetic import make_synthetic
from ugncl.cli import cli_main
from ugncl.config import load_config
from ugncl.engine.recorder import read_metrics
from ugncl.training import train

METHOD_CONFIGS = {"UGNCL": "ugncl_synthetic", "triplet (SGR)": "triplet_synthetic"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-root", default="data/synthetic", help="synthetic world folder")
    parser.add_argument("--noise-ratio", type=float, default=0.5, help="caption noise ratio")
    parser.add_argument("--out", default=None, help="runs folder (default runs/demo-<time>)")
    parser.add_argument(
        "--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
        help="extra overrides applied to both configs (e.g. train.epochs=2)",
    )  # fmt: skip
    return parser.parse_args(argv)


def ensure_world(root: Path) -> None:
    if (root / "synthetic_precomp" / "train_ims.npy").is_file():
        return
    print(f"generating the synthetic world in {root} ...", flush=True)
    started = time.perf_counter()
    make_synthetic(root)
    print(f"  done in {time.perf_counter() - started:.1f}s", flush=True)


def last_division(run_dir: Path) -> dict | None:
    records = [r for r in read_metrics(run_dir) if r["event"] == "division"]
    return records[-1] if records else None


def summarise(name: str, run_dir: Path, test: dict, seconds: float) -> dict:
    division = last_division(run_dir)
    return {
        "method": name,
        "rsum": test["rsum"],
        "i2t/R@1": test["i2t/R@1"],
        "t2i/R@1": test["t2i/R@1"],
        "noisy_f1": None if division is None else division["noisy_f1"],
        "minutes": seconds / 60,
        "run_dir": str(run_dir),
    }


def format_table(rows: list[dict]) -> str:
    header = f"{'method':<16}{'rSum':>8}{'i2t R@1':>9}{'t2i R@1':>9}{'noise F1':>10}{'min':>6}"
    lines = [header, "-" * len(header)]
    for row in rows:
        f1 = "-" if row["noisy_f1"] is None else f"{row['noisy_f1']:.3f}"
        lines.append(
            f"{row['method']:<16}{row['rsum']:>8.1f}{row['i2t/R@1']:>9.1f}"
            f"{row['t2i/R@1']:>9.1f}{f1:>10}{row['minutes']:>6.1f}"
        )
    return "\n".join(lines)


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = Path(args.data_root)
    ensure_world(root)
    out = Path(args.out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    rows = []
    for name, cfg in METHOD_CONFIGS.items():
        overrides = [
            f"data.root={root}",
            f"data.noise_ratio={args.noise_ratio}",
            f"run.out_dir={out}",
            f"run.name={cfg}",
            *args.set,
        ]
        config, _ = load_config(cfg, overrides)
        print(f"training {name} ({cfg}) ...", flush=True)
        started = time.perf_counter()
        result = train(config, config_name=cfg)
        rows.append(summarise(name, result.run_dir, result.test, time.perf_counter() - started))
    table = format_table(rows)
    print(f"\nsynthetic world, {args.noise_ratio:.0%} noise, test split:\n{table}")
    (out / "demo_summary.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    print(f"\nsummary written to {out / 'demo_summary.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
