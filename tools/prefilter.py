"""What the pre-filter (``prefilter.*``) selects on a run's training split, before any training.

``python tools/prefilter.py --cfg ugncl_synthetic --set data.noise_ratio=0.7``

The same config keys as ``tools/train.py`` pick the data and the noise; ``prefilter.alpha``
and ``prefilter.fdr`` the selection (whatever ``prefilter.kind`` and the method say: the
tool shows what ``kind: linear`` would keep). It prints the pairs, the pre-filter's estimate
of the share of noisy pairs (Storey's, from the p-values alone) and how many pairs it keeps;
where the noise file marks the noisy pairs (a synthetic or a re-paired real split), also how
many of the clean and of the noisy pairs it keeps. ``--json`` prints one object.
docs/methods/ugncl.md, "The pre-filter", has the method.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from ugncl.core.engine.seed import draw_seed
from ugncl.core.errors import ConfigError
from ugncl.core.prefilter import PrefilterSelection, select_pairs, training_pair_pvalues
from ugncl.run.build import build_model, open_run_data
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
        help="the RNG seed of the folds and rivals (default train.seed; drawn and printed when "
        "that is null)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args(argv)


def prefilter_report(config: Any, seed: int) -> dict[str, Any]:
    """The pre-filter's selection on ``config``'s training split, with its quality where the
    split's noise is known."""
    settings = config.prefilter
    data = open_run_data(config)
    build_model(config, data)  # binds a raw-image backbone's data to its model's inputs
    train = data.training_data()
    start = time.perf_counter()
    pvalues = training_pair_pvalues(
        lambda indices: train.collate([train.dataset[int(i)] for i in indices]),
        train.num_samples,
        batch_size=256,
        seed=seed,
    )
    if pvalues is None:
        raise ConfigError(
            f"the pre-filter needs region features; model.backbone={config.model.backbone} "
            "trains on pixels (use an SGRAF config)"
        )
    selection = PrefilterSelection(pvalues, select_pairs(pvalues, settings.alpha, settings.fdr))
    report = selection.record(np.asarray(train.clean, dtype=bool))
    report["estimated_noisy_share"] = round(report["estimated_noisy_share"], 4)
    for key in ("noisy_share", "clean_selected", "noisy_selected", "selected_clean_share"):
        if report.get(key) is not None:
            report[key] = round(report[key], 4)
    report.update(alpha=settings.alpha, fdr=settings.fdr,
                  seconds=round(time.perf_counter() - start, 1))  # fmt: skip
    return report


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config, _ = load_config(args.cfg, args.set)
    seed = config.train.seed if args.seed is None else args.seed
    drawn = seed is None  # as a training run does (ugncl_flickr has train.seed: null)
    if drawn:
        seed = draw_seed()
    report = {**prefilter_report(config, seed), "seed": seed}
    if args.json:
        print(json.dumps(report))
        return 0
    if drawn:
        print(f"train.seed is null: the folds drew seed {seed} (--seed {seed} repeats it)")
    print(f"{report['pairs']} training pairs; the pre-filter estimates "
          f"{report['estimated_noisy_share']:.1%} of them noisy")  # fmt: skip
    print(f"it keeps {report['selected']} pairs (prefilter.alpha {report['alpha']}, "
          f"prefilter.fdr {report['fdr']}; {report['seconds']} s)")  # fmt: skip
    if "noisy_share" in report:
        share = report["selected_clean_share"]
        print(f"noise file: {report['noisy_share']:.1%} noisy; selected "
              f"{report['clean_selected']:.1%} of the clean pairs and "
              f"{report['noisy_selected']:.1%} of the noisy ones; the selection is "
              f"{'-' if share is None else f'{share:.1%}'} clean")  # fmt: skip
    if not report["selected"]:
        print("the pre-filter keeps no pair: a run with it trains as prefilter.kind=none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
