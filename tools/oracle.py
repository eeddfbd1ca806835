"""The exact-scene oracle ceiling of a synthetic split (calibrate a world with it).

Example: ``python tools/oracle.py --data-root data/synthetic --split test`` prints the
retrieval metrics (rSum, R@K) the oracle of :mod:`precomputed.synthetic.oracle` reaches: a
ranking that knows every scene exactly and only has the captions' ambiguity against it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from precomputed.captions import read_captions_txt
from precomputed.noise import clean_image_index
from precomputed.synthetic import CAPTIONS_PER_IMAGE, DATASET_NAME
from precomputed.synthetic.oracle import oracle_scores
from precomputed.synthetic.world import read_scenes
from ugncl.core.metrics import METRIC_KEYS, retrieval_metrics

__all__ = ["main", "oracle_metrics"]


def oracle_metrics(
    data_root: str | Path, split: str = "test", *, max_images: int | None = None, seed: int = 0
) -> dict[str, float]:
    """Oracle metrics of ``<data_root>/synthetic_precomp/<split>`` (first ``max_images``)."""
    folder = Path(data_root) / DATASET_NAME
    scenes_path, caps_path = folder / f"{split}_scenes.jsonl", folder / f"{split}_caps.txt"
    for path in (scenes_path, caps_path):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} does not exist; generate the world with tools/make_synthetic.py "
                f"--out {data_root} (or pass --data-root / --split of an existing one)"
            )
    scenes = read_scenes(scenes_path)
    captions = read_captions_txt(caps_path)
    if len(captions) != CAPTIONS_PER_IMAGE * len(scenes):
        raise ValueError(
            f"{caps_path} has {len(captions)} captions for {len(scenes)} scenes; expected "
            f"{CAPTIONS_PER_IMAGE} per scene (regenerate the world)"
        )
    n = len(scenes) if max_images is None else min(max_images, len(scenes))
    scores = oracle_scores(scenes[:n], captions[: CAPTIONS_PER_IMAGE * n], seed=seed)
    return retrieval_metrics(scores, clean_image_index(n, CAPTIONS_PER_IMAGE))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=(
            "Exact-scene oracle of a synthetic split: rank by how many of a caption's noun "
            "phrases (with colour, size, position) and scene word the scene satisfies, ties "
            "broken by a fixed seeded jitter; prints rSum and R@K (ugncl.core.metrics)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--data-root", default="data/synthetic", help="world root (holds synthetic_precomp/)"
    )
    p.add_argument("--split", default="test", help="split name: train, dev or test")
    p.add_argument("--max-images", type=int, default=None, help="use the first N images only")
    p.add_argument("--seed", type=int, default=0, help="seed of the tie-breaking jitter")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.max_images is not None and args.max_images < 1:
        print(f"error: --max-images must be >= 1, got {args.max_images}", file=sys.stderr)
        return 2
    try:
        metrics = oracle_metrics(
            args.data_root, args.split, max_images=args.max_images, seed=args.seed
        )
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(metrics))
    else:
        print(f"oracle ceiling of {args.data_root} [{args.split}]")
        for key in METRIC_KEYS:
            print(f"  {key:<10} {metrics[key]:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
