"""What UGNCL's seed division selects on a run's training split, before any training.

``python tools/seed_division.py --cfg ugncl_synthetic --set data.noise_ratio=0.7``

The same config keys as ``tools/train.py`` pick the data and the noise; ``method.ugncl``'s
``seed_alpha`` and ``seed_fdr`` the selection. It prints the pairs, the seed's estimate of the
share of noisy pairs (Storey's, from the p-values alone) and how many pairs the seed would train
as clean; where the noise file marks the noisy pairs (a synthetic or a re-paired real split),
also how many of the clean and of the noisy pairs it selects. ``--json`` prints one object.
docs/methods/ugncl.md, "The seed division", has the method.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from ugncl.core.engine.seed import draw_seed
from ugncl.core.errors import ConfigError
from ugncl.methods.ugncl.seed import null_share, seed_selection, training_pair_pvalues
from ugncl.run.build import open_run_data
from ugncl.run.cli import cli_main, seed_argument
from ugncl.run.config import load_config


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cfg", required=True, help="config file or bare name in configs/")
    parser.add_argument(
        "--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
        help="override config keys, e.g. --set data.root=data/other data.noise_ratio=0.7",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=seed_argument, default=None,
        help="the folds' seed (default train.seed; drawn and printed when that is null)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args(argv)


def seed_report(config: Any, seed: int) -> dict[str, Any]:
    """The seed's selection on ``config``'s training split, with its quality where the
    split's noise is known."""
    if config.method.name != "ugncl":
        raise ConfigError(
            f"the seed division is UGNCL's; --cfg sets method.name={config.method.name}"
        )
    settings = config.method.ugncl
    train = open_run_data(config).training_data()
    start = time.perf_counter()
    pvalues = training_pair_pvalues(
        lambda indices: train.collate([train.dataset[int(i)] for i in indices]),
        train.num_samples,
        batch_size=256,
        seed=seed,
    )
    if pvalues is None:
        raise ConfigError(
            f"the seed division needs region features; model.backbone={config.model.backbone} "
            "trains on pixels (use an SGRAF config)"
        )
    chosen = seed_selection(pvalues, settings.seed_alpha, settings.seed_fdr)
    clean = np.asarray(train.clean, dtype=bool)
    report = {
        "pairs": len(pvalues),
        "estimated_noisy_share": round(null_share(pvalues), 4),
        "selected": int(chosen.sum()),
        "seed_alpha": settings.seed_alpha,
        "seed_fdr": settings.seed_fdr,
        "seconds": round(time.perf_counter() - start, 1),
    }
    if not clean.all():  # the noise file marks its noisy pairs
        report.update(
            noisy_share=round(float((~clean).mean()), 4),
            clean_selected=round(float(chosen[clean].mean()), 4),
            noisy_selected=round(float(chosen[~clean].mean()), 4),
            selected_clean_share=round(float(clean[chosen].mean()), 4) if chosen.any() else None,
        )
    return report


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config, _ = load_config(args.cfg, args.set)
    seed = config.train.seed if args.seed is None else args.seed
    drawn = seed is None  # as a training run does (ugncl_flickr has train.seed: null)
    if drawn:
        seed = draw_seed()
    report = {**seed_report(config, seed), "seed": seed}
    if args.json:
        print(json.dumps(report))
        return 0
    if drawn:
        print(f"train.seed is null: the folds drew seed {seed} (--seed {seed} repeats it)")
    print(f"{report['pairs']} training pairs; the seed estimates "
          f"{report['estimated_noisy_share']:.1%} of them noisy")  # fmt: skip
    print(f"it selects {report['selected']} pairs as clean (seed_alpha {report['seed_alpha']}, "
          f"seed_fdr {report['seed_fdr']}; {report['seconds']} s)")  # fmt: skip
    if "noisy_share" in report:
        share = report["selected_clean_share"]
        print(f"noise file: {report['noisy_share']:.1%} noisy; selected "
              f"{report['clean_selected']:.1%} of the clean pairs and "
              f"{report['noisy_selected']:.1%} of the noisy ones; the selection is "
              f"{'-' if share is None else f'{share:.1%}'} clean")  # fmt: skip
    if not report["selected"]:
        print("the seed selects no pair: UGNCL divides by the model from the start")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
