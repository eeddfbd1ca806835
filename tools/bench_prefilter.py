"""Benchmark of the pre-filter (``prefilter.kind: linear``) at the sizes of the released datasets.

``python tools/bench_prefilter.py [--preset flickr30k|coco|cc152k | --images I
--captions-per-image C] [--dim 2048] [--vocab 8000] [--noise 0.5] [--threads 1] [--json]``

A planted world stands in for the pooled region features and the captions: each image shows
3 of 300 object categories, its pooled feature is the ReLU of their directions plus noise, and
each caption names the objects of its true image among random filler words; ``--noise`` of the
captions are paired with a random image. The cost of the fit does not depend on the values, so
this times :func:`ugncl.core.prefilter.prefilter_pvalues` (bags, components, the cross-fitted
ridge fits, the p-values) and reports its wall seconds, the process's peak resident memory,
and how the selection fares against the planted noise. Reading the pairs from a split
(``gather_prefilter_inputs``) is not included: ``tools/prefilter.py`` prints the whole time on a
real split.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np
import torch

from ugncl.core.prefilter import null_share, prefilter_pvalues, select_pairs
from ugncl.run.cli import cli_main

# Training images and captions per image of the released splits (NCR's precomputed features).
PRESETS = {"flickr30k": (29000, 5), "coco": (113287, 5), "cc152k": (150000, 1)}
CATEGORIES, OBJECTS, FILLER = 300, 3, 6


def planted_pairs(
    images: int, per_image: int, dim: int, vocab: int, noise: float, seed: int = 0
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """A planted world of ``images`` pooled features and ``images * per_image`` captions.

    Returns:
        ``(captions, pooled (I, dim) float32, image_index (N,), clean (N,) bool)``.
    """
    rng = np.random.default_rng(seed)
    objects = rng.integers(0, CATEGORIES, size=(images, OBJECTS))
    directions = rng.standard_normal((CATEGORIES, dim)).astype(np.float32)
    pooled = directions[objects].sum(1)
    pooled += 2.0 * rng.standard_normal((images, dim), dtype=np.float32)
    np.maximum(pooled, 0.0, out=pooled)
    truth = np.repeat(np.arange(images), per_image)
    image_index = truth.copy()
    moved = rng.random(len(truth)) < noise
    image_index[moved] = (truth[moved] + rng.integers(1, images, moved.sum())) % images
    # Word ids: 0 padding, 1..CATEGORIES the object names, the rest filler.
    filler = rng.integers(CATEGORIES + 1, vocab, size=(len(truth), FILLER))
    captions = list(np.concatenate([objects[truth] + 1, filler], axis=1))
    return captions, pooled, image_index, image_index == truth


def bench_prefilter(images: int, per_image: int, dim: int, vocab: int, noise: float) -> dict:
    captions, pooled, image_index, clean = planted_pairs(images, per_image, dim, vocab, noise)
    start = time.perf_counter()
    pvalues = prefilter_pvalues(captions, vocab, pooled, image_index, seed=0)
    seconds = time.perf_counter() - start
    chosen = select_pairs(pvalues, alpha=0.02, fdr=0.1)
    return {
        "images": images,
        "pairs": len(captions),
        "dim": dim,
        "seconds": round(seconds, 1),
        # ru_maxrss is in KiB on Linux.
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "noise": noise,
        "estimated_noisy_share": round(null_share(pvalues), 3),
        "selected": int(chosen.sum()),
        "selected_clean_share": round(float(clean[chosen].mean()), 3) if chosen.any() else None,
        "noisy_selected": round(float(chosen[~clean].mean()), 4) if (~clean).any() else None,
    }


@cli_main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default=None)
    p.add_argument("--images", type=int, default=5000)
    p.add_argument("--captions-per-image", type=int, default=5)
    p.add_argument("--dim", type=int, default=2048, help="region-feature dimensions")
    p.add_argument("--vocab", type=int, default=8000, help="words (the fit keeps 4096)")
    p.add_argument("--noise", type=float, default=0.5, help="share of re-paired captions")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print one JSON object only")
    args = p.parse_args(argv)
    if args.preset is not None:
        args.images, args.captions_per_image = PRESETS[args.preset]
    if args.images < 2 or args.captions_per_image < 1 or args.dim < 1:
        p.error("--images must be >= 2, --captions-per-image and --dim >= 1")
    if not 0.0 <= args.noise < 1.0:
        p.error(f"--noise must lie in [0, 1), got {args.noise}")
    if args.vocab <= CATEGORIES + 1:
        p.error(f"--vocab must exceed {CATEGORIES + 1} (the object names and padding)")
    torch.set_num_threads(args.threads)
    report = bench_prefilter(args.images, args.captions_per_image, args.dim, args.vocab, args.noise)
    report["threads"] = args.threads
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:24s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
